package cli

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestAccelOneChoice: vm start --accel and libvirt xml --accel accept the
// same values, and refuse the same others (libvirt's "qemu" among them) as
// usage errors naming --accel.
func TestAccelOneChoice(t *testing.T) {
	socket := newFakeDaemon().serve(t)
	image := libvirtFakeImage(t)
	libvirtWithCPUInfo(t, "svm")
	for _, v := range []string{"auto", "kvm", "tcg", "qemu", "xen", "KVM"} {
		valid := slices.Contains(accelValues, v)
		x := runCLI(t.Context(), nil, false, "--socket", socket, "libvirt", "xml", "web", "--domain", "--image", image, "--accel", v)
		// vm start against a daemon that is not there: a valid accelerator
		// gets as far as asking sluiced for the VM.
		s := runCLI(t.Context(), nil, false, "--socket", filepath.Join(t.TempDir(), "none.sock"), "vm", "start", "web", "--accel", v)
		for cmd, r := range map[string]result{"libvirt xml": x, "vm start": s} {
			refused := r.code == ExitUsage && strings.Contains(r.stderr, `--accel "`+v+`": want auto, kvm, tcg`)
			if refused == valid || (valid && r.code == ExitUsage) {
				t.Errorf("%s --accel %s: %+v; valid %v", cmd, v, r, valid)
			}
		}
	}
}

// TestLibvirtXMLAccel: libvirt's domain type follows --accel (tcg is
// "qemu"), auto by the CPU's flags.
func TestLibvirtXMLAccel(t *testing.T) {
	socket := newFakeDaemon().serve(t)
	image := libvirtFakeImage(t)
	for _, tc := range []struct{ cpu, accel, want string }{
		{"svm", "tcg", `<domain type="qemu">`}, {"", "kvm", `<domain type="kvm">`},
		{"vmx", "auto", `<domain type="kvm">`}, {"", "auto", `<domain type="qemu">`},
	} {
		libvirtWithCPUInfo(t, tc.cpu)
		r := runCLI(t.Context(), nil, false, "--socket", socket, "libvirt", "xml", "web", "--domain", "--image", image, "--accel", tc.accel)
		if r.code != ExitOK || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("cpu %q --accel %s: %+v, want %s", tc.cpu, tc.accel, r, tc.want)
		}
	}
}

// TestLibvirtXMLGuestImageEnv: libvirt xml --domain takes its image from
// SLUICE_GUEST_IMAGE as vm start does; --image wins.
func TestLibvirtXMLGuestImageEnv(t *testing.T) {
	socket := newFakeDaemon().serve(t)
	image := libvirtFakeImage(t)
	env := map[string]string{GuestImageEnv: image}
	r := runCLI(t.Context(), env, false, "--socket", socket, "libvirt", "xml", "web", "--domain")
	if r.code != ExitOK || !strings.Contains(r.stdout, "<kernel>"+filepath.Join(image, "vmlinux")+"</kernel>") {
		t.Errorf("with %s=%s: %+v", GuestImageEnv, image, r)
	}
	r = runCLI(t.Context(), env, false, "--socket", socket, "libvirt", "xml", "web", "--domain", "--image", "/nonexistent/guest")
	if r.code != ExitError || !strings.Contains(r.stderr, "/nonexistent/guest/vmlinux") {
		t.Errorf("--image over the environment: %+v", r)
	}
	r = runCLI(t.Context(), map[string]string{GuestImageEnv: "/nonexistent/env-guest"}, false,
		"--socket", filepath.Join(t.TempDir(), "none.sock"), "vm", "start", "web")
	if r.code != ExitError || !strings.Contains(r.stderr, "guest image /nonexistent/env-guest") {
		t.Errorf("vm start with %s: %+v", GuestImageEnv, r)
	}
}

// TestRootHelpListsEnvironment: sluicectl --help names every environment
// variable it reads, with its flag.
func TestRootHelpListsEnvironment(t *testing.T) {
	r := runCLI(t.Context(), nil, false, "--help")
	for _, env := range []string{SocketEnv, HostTokenFileEnv, ControllerEnv, TokenEnv, ConfigEnv, GuestImageEnv} {
		if r.code != ExitOK || !strings.Contains(r.stdout, "  "+env+" ") {
			t.Errorf("--help does not list %s:\n%s", env, r.stdout)
		}
	}
}
