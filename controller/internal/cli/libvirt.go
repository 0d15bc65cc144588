package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/internal/cmdline"
	"github.com/sluice-gpu/sluice/vmm-plugin/libvirt"
	"github.com/sluice-gpu/sluice/vmm-plugin/qemu"
)

// Defaults of "libvirt xml".
const (
	libvirtCmdline    = libvirt.DefaultCmdline
	libvirtLoaderAuto = "auto"
	libvirtLoaderNone = "none"
)

// libvirtCPUInfo is read by --accel auto; tests point it elsewhere.
var libvirtCPUInfo = "/proc/cpuinfo"

func newLibvirtCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "libvirt",
		Short: "Connect libvirt domains to Sluice",
		Long: `Connect libvirt domains to Sluice. A domain uses Sluice through one
<shmem name='sluice'> device of model ivshmem-doorbell whose server is the VM's
endpoint socket in sluiced. With the hook installed
(deploy/install-libvirt-hook.sh), starting the domain creates the VM named
after it in sluiced, and stopping it deletes the VM again.`,
		Example: `  sluicectl libvirt xml web
  sluicectl libvirt xml web --domain > web.xml && virsh define web.xml`,
		Args: groupArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(newLibvirtXMLCommand(a))
	return cmd
}

// libvirtXMLFlags are the flags of "libvirt xml".
type libvirtXMLFlags struct {
	domain    bool
	metadata  bool
	image     string
	memoryMiB uint64
	accel     string
	serialLog string
	loader    string
	cmdline   string
}

func newLibvirtXMLCommand(a *app) *cobra.Command {
	var fl libvirtXMLFlags
	cmd := &cobra.Command{
		Use:   "xml NAME [--domain]",
		Short: "Print libvirt domain XML for a VM: its <shmem> device, or a whole domain",
		Long: `Ask sluiced for VM NAME and print the libvirt <shmem> device that connects a
domain to it, to paste into <devices> of the domain named NAME (virsh edit
NAME). The device's server path and MSI vectors must match the VM: the hook
refuses to start a domain whose device does not.

--metadata prints instead the <sluice:vm> element that carries the VM's
settings (weight, cap, channels, ring entries, region size); with it in the
domain's <metadata>, the hook recreates the VM with the same settings after it
deleted it. Set it with:

  virsh metadata NAME ` + libvirt.Namespace + ` --key sluice --config \
      --set "$(sluicectl libvirt xml NAME --metadata)"

--domain prints a whole domain for the VM instead, with both: the guest kernel
and initramfs of --image (DIR/vmlinux and DIR/initramfs.gz, from make
guest-image) booted directly, qboot as firmware where installed, the serial
console written to --serial-log, the VM's volume (if it has one) shared with
the guest over virtio-9p (<filesystem accessmode='mapped'>, mount tag
sluice-volume, mounted at /volume by the guest image's init), and power-off,
reboot and crash all ending the domain (so that the VM is released). --accel
auto picks kvm when the CPU shows vmx or svm, else tcg (libvirt's domain type
'qemu'). --image defaults to $` + GuestImageEnv + `, else ` + defaultGuestImage + `.`,
		Example: `  sluicectl libvirt xml web
  sluicectl libvirt xml web --metadata
  sluicectl libvirt xml web --domain --image build/guest --memory 512 --accel tcg > web.xml
  virsh define web.xml && virsh start web`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := fl.check(cmd); err != nil {
				return err
			}
			fl.image = a.guestImage(fl.image)
			vm, err := a.client().GetVM(cmd.Context(), args[0])
			if err != nil {
				if errors.Is(err, hostapi.ErrNotFound) {
					return fmt.Errorf("%w (create it first: sluicectl vm create %s)", vmError(args[0], err), clean(args[0]))
				}
				return vmError(args[0], err)
			}
			out, err := fl.render(vm)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&fl.domain, "domain", false, "print a whole domain for the VM instead of its <shmem> device")
	f.BoolVar(&fl.metadata, "metadata", false, "print the <sluice:vm> metadata element instead of the <shmem> device")
	f.StringVar(&fl.image, "image", "", "with --domain: directory holding the guest's vmlinux and initramfs.gz (env "+GuestImageEnv+", default "+defaultGuestImage+")")
	f.Uint64Var(&fl.memoryMiB, "memory", libvirt.DefaultMemoryMiB, "with --domain: guest memory in MiB")
	f.StringVar(&fl.accel, "accel", qemu.AccelAuto, "with --domain: "+accelHelp)
	cmdline.Renamed(f, "type", "accel", "kvm, tcg or auto; libvirt's domain type qemu is tcg")
	f.StringVar(&fl.serialLog, "serial-log", "", "with --domain: file for the serial console (default /var/log/libvirt/qemu/NAME-serial.log)")
	f.StringVar(&fl.loader, "loader", libvirtLoaderAuto, "with --domain: firmware ROM; auto: "+libvirt.QbootROM+" if installed; none: QEMU's default")
	f.StringVar(&fl.cmdline, "cmdline", libvirtCmdline, "with --domain: kernel command line")
	return cmd
}

// check rejects flag combinations that would be silently ignored.
func (fl *libvirtXMLFlags) check(cmd *cobra.Command) error {
	if fl.domain && fl.metadata {
		return usageErrorf("--domain and --metadata exclude each other (--domain includes the metadata)")
	}
	if !fl.domain {
		for _, name := range []string{"image", "memory", "accel", "serial-log", "loader", "cmdline"} {
			if cmd.Flags().Changed(name) {
				return usageErrorf("--%s needs --domain", name)
			}
		}
		return nil
	}
	if fl.memoryMiB == 0 {
		return usageErrorf("--memory must be at least 1 (MiB)")
	}
	return checkAccel(fl.accel, true)
}

func libvirtVMInfo(vm hostapi.VM) libvirt.VMInfo {
	return libvirt.VMInfo{
		Endpoint: vm.Endpoint,
		Vectors:  uint(max(vm.Vectors, 0)),
		Volume:   vm.Volume,
		Settings: libvirt.Settings{Weight: vm.Weight, Cap: vm.Cap, Channels: vm.Channels,
			RingEntries: vm.RingEntries, RegionSize: vm.RegionSize},
	}
}

func (fl *libvirtXMLFlags) render(vm hostapi.VM) ([]byte, error) {
	info := libvirtVMInfo(vm)
	switch {
	case fl.metadata:
		return []byte(libvirt.SluiceMetadata(info.Settings).XML + "\n"), nil
	case !fl.domain:
		return libvirt.MarshalShmem(libvirt.ShmemFor(info))
	}
	opts, err := fl.domainOptions(vm.Name, info)
	if err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("vm %q: %w", clean(vm.Name), err)
	}
	return libvirt.Marshal(libvirt.ExampleDomain(opts))
}

// domainOptions resolves the flags into absolute paths and a domain type.
func (fl *libvirtXMLFlags) domainOptions(name string, info libvirt.VMInfo) (libvirt.DomainOptions, error) {
	image, err := filepath.Abs(fl.image)
	if err != nil {
		return libvirt.DomainOptions{}, fmt.Errorf("--image %q: %w", fl.image, err)
	}
	kernel, initrd := filepath.Join(image, "vmlinux"), filepath.Join(image, "initramfs.gz")
	for _, p := range []string{kernel, initrd} {
		if _, err := os.Stat(p); err != nil {
			return libvirt.DomainOptions{}, fmt.Errorf("guest image: %w (build it with make guest-image, or set --image)", err)
		}
	}
	serialLog := fl.serialLog
	if serialLog == "" {
		serialLog = filepath.Join("/var/log/libvirt/qemu", name+"-serial.log")
	}
	if serialLog, err = filepath.Abs(serialLog); err != nil {
		return libvirt.DomainOptions{}, fmt.Errorf("--serial-log %q: %w", fl.serialLog, err)
	}
	loader := fl.loader
	switch loader {
	case libvirtLoaderNone:
		loader = ""
	case libvirtLoaderAuto:
		loader = ""
		if _, err := os.Stat(libvirt.QbootROM); err == nil {
			loader = libvirt.QbootROM
		}
	default:
		if loader, err = filepath.Abs(loader); err != nil {
			return libvirt.DomainOptions{}, fmt.Errorf("--loader %q: %w", fl.loader, err)
		}
	}
	accel := fl.accel
	if accel == qemu.AccelAuto {
		accel = qemu.AccelTCG
		if libvirtHasHardwareVirt(libvirtCPUInfo) {
			accel = qemu.AccelKVM
		}
	}
	return libvirt.DomainOptions{
		Name: name, Type: libvirtDomainType(accel), MemoryMiB: fl.memoryMiB, Loader: loader,
		Kernel: kernel, Initrd: initrd, Cmdline: fl.cmdline, SerialLog: serialLog, VM: info,
	}, nil
}

// libvirtHasHardwareVirt reports whether the CPU flags in cpuinfo show vmx (Intel)
// or svm (AMD). /dev/kvm alone is not enough: nested kvm_pvm offers it
// without them and cannot boot an unmodified Linux guest.
func libvirtHasHardwareVirt(cpuinfo string) bool {
	b, err := os.ReadFile(cpuinfo)
	return err == nil && qemu.HasVirtFlag(string(b))
}
