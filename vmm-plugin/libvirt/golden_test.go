package libvirt

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/internal/testdeps"
	"github.com/sluice-gpu/sluice/vmm-plugin/qemu"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// testVM is the VM the golden files describe.
var testVM = VMInfo{
	Endpoint: "/run/sluice/vms/web.sock",
	Vectors:  5,
	Settings: Settings{Weight: 2, Cap: 0.25, Channels: 4, RingEntries: 256, RegionSize: 4 << 20},
}

func testOptions(typ string) DomainOptions {
	return DomainOptions{
		Name:      "web",
		Type:      typ,
		MemoryMiB: 256,
		Loader:    QbootROM,
		Kernel:    "/var/lib/sluice/guest/vmlinux",
		Initrd:    "/var/lib/sluice/guest/initramfs.gz",
		Cmdline:   "console=ttyS0 quiet panic=-1 sluice.agent=--device,info",
		SerialLog: "/var/log/libvirt/qemu/web-serial.log",
		VM:        testVM,
	}
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the generated xml (run go test -update if the change is intended)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// testVolume is the volume of the golden domain-tcg.xml and filesystem.xml.
const testVolume = "/var/lib/sluice/state/volumes/web"

func TestGoldenFilesystem(t *testing.T) {
	vm := testVM
	vm.Volume = testVolume
	fs, ok := FilesystemFor(vm)
	if !ok {
		t.Fatal("no filesystem for a VM with a volume")
	}
	got, err := MarshalFilesystem(fs)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "filesystem.xml", got)
	if _, ok := FilesystemFor(testVM); ok {
		t.Error("a filesystem for a VM without a volume")
	}
}

func TestGoldenShmem(t *testing.T) {
	got, err := MarshalShmem(ShmemFor(testVM))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "shmem.xml", got)
}

// wholeDomains are the golden whole domains; each must satisfy libvirt's schema.
var wholeDomains = []struct {
	file string
	opts DomainOptions
}{
	{"domain-tcg.xml", func() DomainOptions {
		o := testOptions(DomainTypeQEMU)
		o.VM.Volume = testVolume
		return o
	}()},
	{"domain-kvm.xml", func() DomainOptions {
		o := testOptions(DomainTypeKVM)
		o.UUID = "8f4e1c2a-3b5d-4e6f-9a7b-0c1d2e3f4a5b"
		o.VCPUs = 2
		o.Loader = "" // SeaBIOS
		o.SerialLog = ""
		o.Emulator = "/usr/bin/qemu-system-x86_64"
		return o
	}()},
}

func TestGoldenDomains(t *testing.T) {
	for _, tc := range wholeDomains {
		t.Run(tc.file, func(t *testing.T) {
			if err := tc.opts.Validate(); err != nil {
				t.Fatal(err)
			}
			got, err := Marshal(ExampleDomain(tc.opts))
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.file, got)
		})
	}
}

// requireValidator returns libvirt's schema validator; without it the test
// fails (internal/testdeps).
func requireValidator(t *testing.T) string {
	t.Helper()
	return testdeps.Tool(t, "virt-xml-validate", "libvirt-clients")
}

func validate(t *testing.T, validator, file string) {
	t.Helper()
	out, err := exec.Command(validator, file, "domain").CombinedOutput()
	if err != nil {
		t.Errorf("virt-xml-validate %s domain: %v\n%s", file, err, out)
	}
}

// TestGoldenSchema checks the golden domains against libvirt's RelaxNG schema,
// and a domain with the shmem of shmem.xml and the filesystem of
// filesystem.xml pasted in by hand, as an operator would.
func TestGoldenSchema(t *testing.T) {
	validator := requireValidator(t)
	for _, tc := range wholeDomains {
		validate(t, validator, filepath.Join("testdata", tc.file))
	}
	shmem, err := os.ReadFile(filepath.Join("testdata", "shmem.xml"))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := os.ReadFile(filepath.Join("testdata", "filesystem.xml"))
	if err != nil {
		t.Fatal(err)
	}
	doc := `<domain type='qemu'>
  <name>pasted</name>
  <memory unit='MiB'>128</memory>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
` + string(fs) + string(shmem) + `  </devices>
</domain>
`
	path := filepath.Join(t.TempDir(), "pasted.xml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	validate(t, validator, path)
}

// TestSchemaRejects makes sure the validator does fail: a schema check that
// passes everything would make TestGoldenSchema worthless.
func TestSchemaRejects(t *testing.T) {
	validator := requireValidator(t)
	for _, tc := range []struct {
		what  string
		spoil func(*Domain)
	}{
		{"shmem model", func(d *Domain) { d.Devices.Shmems[0].Model.Type = "ivshmem-bell" }},
		// QEMU's name for it, not libvirt's.
		{"filesystem access mode", func(d *Domain) { d.Devices.Filesystems[0].AccessMode = "mapped-xattr" }},
	} {
		o := testOptions(DomainTypeQEMU)
		o.VM.Volume = testVolume
		d := ExampleDomain(o)
		tc.spoil(&d)
		b, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "bad.xml")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(validator, path, "domain").CombinedOutput(); err == nil {
			t.Errorf("virt-xml-validate accepted a bad %s:\n%s", tc.what, out)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range wholeDomains {
		t.Run(tc.file, func(t *testing.T) {
			d := ExampleDomain(tc.opts)
			b, err := Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseDomain(b)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := normalized(back), normalized(d); !reflect.DeepEqual(got, want) {
				t.Errorf("parse(marshal(d)) != d\ngot  %s\nwant %s", dump(got), dump(want))
			}
			s, err := SluiceSettings(back)
			if err != nil || s != tc.opts.VM.Settings {
				t.Errorf("SluiceSettings = %+v, %v; want %+v", s, err, tc.opts.VM.Settings)
			}
			dev, ok := SluiceShmem(back)
			dev.XMLName = xml.Name{}
			if !ok || !reflect.DeepEqual(dev, ShmemFor(tc.opts.VM)) {
				t.Errorf("SluiceShmem = %+v, %v", dev, ok)
			}
		})
	}
}

func TestParseGolden(t *testing.T) {
	for _, tc := range wholeDomains {
		b, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		d, err := ParseDomain(b)
		if err != nil {
			t.Fatal(err)
		}
		if d.Name != "web" || d.Type != tc.opts.Type || !strings.Contains(string(b), "ivshmem-doorbell") {
			t.Errorf("%s: parsed %q of type %q", tc.file, d.Name, d.Type)
		}
	}
}

// normalized clears the element names the decoder records and the encoder
// ignores, so that a parsed domain compares equal to a built one.
func normalized(d Domain) Domain {
	d.XMLName = xml.Name{}
	if d.Devices != nil {
		devs := *d.Devices
		devs.Shmems = append([]DomainShmem(nil), devs.Shmems...)
		for i := range devs.Shmems {
			devs.Shmems[i].XMLName = xml.Name{}
		}
		devs.Filesystems = append([]DomainFilesystem(nil), devs.Filesystems...)
		for i := range devs.Filesystems {
			devs.Filesystems[i].XMLName = xml.Name{}
		}
		d.Devices = &devs
	}
	return d
}

func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", " ")
	return string(b)
}

// TestVolumeNames keeps the domain XML's volume in step with QEMU's command
// line (vmm-plugin/qemu), which sluice-init's mount matches.
func TestVolumeNames(t *testing.T) {
	if VolumeTag != qemu.VolumeTag {
		t.Errorf("mount tag %q here, %q in qemu", VolumeTag, qemu.VolumeTag)
	}
	if VolumeFileMode != qemu.VolumeFileMode || VolumeDirMode != qemu.VolumeDirMode {
		t.Errorf("modes %s/%s here, %s/%s in qemu", VolumeFileMode, VolumeDirMode, qemu.VolumeFileMode, qemu.VolumeDirMode)
	}
	// libvirt's mapped is QEMU's mapped-xattr (libvirt's mapped-file does not exist).
	if VolumeAccessMode != "mapped" || qemu.VolumeSecurityModel != "mapped-xattr" {
		t.Errorf("access mode %q here, security model %q in qemu", VolumeAccessMode, qemu.VolumeSecurityModel)
	}
}
