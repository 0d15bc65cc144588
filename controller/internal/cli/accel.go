package cli

import (
	"slices"
	"strings"

	"github.com/sluice-gpu/sluice/vmm-plugin/libvirt"
	"github.com/sluice-gpu/sluice/vmm-plugin/qemu"
)

// The accelerator of a guest is one choice with one name and one set of
// values wherever sluicectl makes a guest or its domain: vm start --accel,
// libvirt xml --accel, vm xml --accel. libvirt calls TCG domain type
// "qemu"; only the XML says so.
var accelValues = []string{qemu.AccelAuto, qemu.AccelKVM, qemu.AccelTCG}

// accelHelp is the --accel flag's text.
const accelHelp = "accelerator: auto (KVM where the CPU has vmx/svm, else TCG), kvm or tcg"

// checkAccel refuses an accelerator outside the set; auto only where the
// command can look at the machine the guest runs on.
func checkAccel(accel string, auto bool) error {
	want := accelValues
	if !auto {
		want = want[1:]
	}
	if !slices.Contains(want, accel) {
		return usageErrorf("--accel %q: want %s", accel, strings.Join(want, ", "))
	}
	return nil
}

// libvirtDomainType is the libvirt domain type of an accelerator, kvm or tcg.
func libvirtDomainType(accel string) string {
	if accel == qemu.AccelKVM {
		return libvirt.DomainTypeKVM
	}
	return libvirt.DomainTypeQEMU
}

// guestImage is the guest image directory: the flag's, else the
// environment's (GuestImageEnv), else defaultGuestImage.
func (a *app) guestImage(flag string) string {
	if flag != "" {
		return flag
	}
	if env := a.opts.Getenv(GuestImageEnv); env != "" {
		return env
	}
	return defaultGuestImage
}
