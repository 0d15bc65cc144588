package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/internal/testdeps"
	"github.com/sluice-gpu/sluice/vmm-plugin/libvirt"
)

const libvirtWantWebShmem = `<shmem name="sluice">
  <model type="ivshmem-doorbell"></model>
  <server path="/run/sluice/vms/web.sock"></server>
  <msi vectors="5" ioeventfd="on"></msi>
</shmem>
`

// libvirtFakeImage is a guest image directory with empty kernel and initramfs.
func libvirtFakeImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"vmlinux", "initramfs.gz"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// libvirtWithCPUInfo points --accel auto at a cpuinfo with the given flags.
func libvirtWithCPUInfo(t *testing.T, flags string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cpuinfo")
	if err := os.WriteFile(path, []byte("processor\t: 0\nflags\t\t: "+flags+"\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := libvirtCPUInfo
	libvirtCPUInfo = path
	t.Cleanup(func() { libvirtCPUInfo = old })
}

func TestLibvirtXML(t *testing.T) {
	socket := newFakeDaemon().serve(t)
	got := runCLI(t.Context(), nil, false, "--socket", socket, "libvirt", "xml", "web")
	if got != (result{stdout: libvirtWantWebShmem}) {
		t.Errorf("libvirt xml web:\n%+v\nwant stdout\n%s", got, libvirtWantWebShmem)
	}

	got = runCLI(t.Context(), nil, false, "--socket", socket, "libvirt", "xml", "batch", "--metadata")
	want := `<sluice:vm xmlns:sluice="` + libvirt.Namespace + `" weight="1" cap="0.25" channels="8" ring-entries="512" region-size="67108864"/>` + "\n"
	if got != (result{stdout: want}) {
		t.Errorf("libvirt xml batch --metadata:\n%+v\nwant stdout %s", got, want)
	}

	got = runCLI(t.Context(), nil, false, "--socket", socket, "libvirt", "xml", "nope")
	if want := "sluicectl: vm \"nope\": not found (create it first: sluicectl vm create nope)\n"; got != (result{stderr: want, code: ExitError}) {
		t.Errorf("unknown vm: %+v, want stderr %q", got, want)
	}
}

func TestLibvirtXMLDomain(t *testing.T) {
	socket := newFakeDaemon().serve(t)
	image := libvirtFakeImage(t)
	for _, tc := range []struct {
		name    string
		flags   string // cpuinfo flags
		args    []string
		contain []string
	}{
		{name: "tcg where the cpu has no vmx", flags: "fpu sse2 hypervisor",
			args: []string{"--image", image},
			contain: []string{`<domain type="qemu">`, "<name>batch</name>",
				`<memory unit="MiB">256</memory>`,
				"<kernel>" + filepath.Join(image, "vmlinux") + "</kernel>",
				"<initrd>" + filepath.Join(image, "initramfs.gz") + "</initrd>",
				"<cmdline>console=ttyS0 quiet panic=-1 sluice.agent=--device,info</cmdline>",
				`<source path="/var/log/libvirt/qemu/batch-serial.log">`,
				`<server path="/run/sluice/vms/batch.sock">`, `<msi vectors="9" ioeventfd="on">`,
				`weight="1" cap="0.25" channels="8" ring-entries="512" region-size="67108864"`,
				"<acpi></acpi>", "<on_poweroff>destroy</on_poweroff>"}},
		{name: "kvm where the cpu has vmx", flags: "fpu vmx sse2",
			args:    []string{"--image", image, "--memory", "512", "--serial-log", "/tmp/b.log", "--loader", "none"},
			contain: []string{`<domain type="kvm">`, `<memory unit="MiB">512</memory>`, `<source path="/tmp/b.log">`}},
		{name: "accel forced", flags: "svm",
			args:    []string{"--image", image, "--accel", "tcg", "--loader", "/opt/fw.rom"},
			contain: []string{`<domain type="qemu">`, `<loader type="rom">/opt/fw.rom</loader>`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			libvirtWithCPUInfo(t, tc.flags)
			got := runCLI(t.Context(), nil, false,
				append([]string{"--socket", socket, "libvirt", "xml", "batch", "--domain"}, tc.args...)...)
			if got.code != ExitOK || got.stderr != "" {
				t.Fatalf("failed: %+v", got)
			}
			for _, s := range tc.contain {
				if !strings.Contains(got.stdout, s) {
					t.Errorf("output lacks %s:\n%s", s, got.stdout)
				}
			}
			if _, err := libvirt.ParseDomain([]byte(got.stdout)); err != nil {
				t.Error(err)
			}
			if path := testdeps.Tool(t, "virt-xml-validate", "libvirt-clients"); path != "" {
				file := filepath.Join(t.TempDir(), "d.xml")
				if err := os.WriteFile(file, []byte(got.stdout), 0o644); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command(path, file, "domain").CombinedOutput(); err != nil {
					t.Errorf("virt-xml-validate: %v\n%s", err, out)
				}
			}
		})
	}
}

// TestLibvirtXMLDomainVolume: a VM with a volume gets it as a virtio-9p
// filesystem in its domain; one without (batch, above) gets none.
func TestLibvirtXMLDomainVolume(t *testing.T) {
	d := newFakeDaemon()
	vm := d.vms["batch"]
	vm.Volume = "/var/lib/sluice/volumes/batch"
	d.vms["batch"] = vm
	socket := d.serve(t)
	image := libvirtFakeImage(t)
	libvirtWithCPUInfo(t, "fpu")
	want := `    <filesystem type="mount" accessmode="mapped" fmode="0644" dmode="0755">
      <source dir="/var/lib/sluice/volumes/batch"></source>
      <target dir="sluice-volume"></target>
    </filesystem>
`
	got := runCLI(t.Context(), nil, false, "--socket", socket, "libvirt", "xml", "batch", "--domain", "--image", image)
	if got.code != ExitOK || !strings.Contains(got.stdout, want) {
		t.Errorf("libvirt xml batch --domain of a VM with a volume: %+v\nwant it to contain\n%s", got, want)
	}
	got = runCLI(t.Context(), nil, false, "--socket", newFakeDaemon().serve(t), "libvirt", "xml", "batch", "--domain", "--image", image)
	if got.code != ExitOK || strings.Contains(got.stdout, "<filesystem") {
		t.Errorf("libvirt xml batch --domain of a VM without a volume: %+v", got)
	}
}

func TestLibvirtXMLErrors(t *testing.T) {
	socket := newFakeDaemon().serve(t)
	hint := "Run 'sluicectl libvirt xml --help' for usage.\n"
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
		code   int
	}{
		{"domain flag without --domain", []string{"web", "--memory", "512"}, "sluicectl: --memory needs --domain\n" + hint, ExitUsage},
		{"both outputs", []string{"web", "--domain", "--metadata"},
			"sluicectl: --domain and --metadata exclude each other (--domain includes the metadata)\n" + hint, ExitUsage},
		{"bad accel", []string{"web", "--domain", "--accel", "xen"}, "sluicectl: --accel \"xen\": want auto, kvm, tcg\n" + hint, ExitUsage},
		{"old type flag", []string{"web", "--domain", "--type", "qemu"}, "sluicectl: invalid argument \"qemu\" for \"--type\" flag: this flag was replaced by --accel (kvm, tcg or auto; libvirt's domain type qemu is tcg)\n" + hint, ExitUsage},
		{"zero memory", []string{"web", "--domain", "--memory", "0"}, "sluicectl: --memory must be at least 1 (MiB)\n" + hint, ExitUsage},
		{"no name", nil, "sluicectl: missing argument NAME\n" + hint, ExitUsage},
		{"missing image", []string{"web", "--domain", "--image", "/nonexistent/guest"},
			"sluicectl: guest image: stat /nonexistent/guest/vmlinux: no such file or directory (build it with make guest-image, or set --image)\n",
			ExitError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runCLI(t.Context(), nil, false, append([]string{"--socket", socket, "libvirt", "xml"}, tc.args...)...)
			if got != (result{stderr: tc.stderr, code: tc.code}) {
				t.Errorf("got %+v\nwant stderr %q code %d", got, tc.stderr, tc.code)
			}
		})
	}
}

func TestLibvirtHasHardwareVirt(t *testing.T) {
	for flags, want := range map[string]bool{"fpu vmx": true, "svm lm": true, "fpu vmxon hypervisor": false, "": false} {
		libvirtWithCPUInfo(t, flags)
		if got := libvirtHasHardwareVirt(libvirtCPUInfo); got != want {
			t.Errorf("flags %q: %v, want %v", flags, got, want)
		}
	}
	if libvirtHasHardwareVirt("/nonexistent/cpuinfo") {
		t.Error("a missing cpuinfo shows hardware virtualization")
	}
}
