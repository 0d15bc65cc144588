package qemu

import (
	"errors"
	"strings"
	"testing"
)

func TestArgs(t *testing.T) {
	cfg := Config{
		Name: "web", Kernel: "/img/vmlinux", Initrd: "/img/initramfs.gz", Firmware: "/fw/qboot.rom",
		Append: "console=ttyS0 sluice.agent=--device,serve", Endpoint: "/run/sluice/vms/web.sock", Vectors: 6,
		RunDir: "/run/sluice/guests/web",
	}
	got, err := cfg.Args(AccelTCG, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "-name guest=web -machine pc,accel=tcg -m 256 -smp 1 -nodefaults -no-user-config -display none -no-reboot " +
		"-bios /fw/qboot.rom -kernel /img/vmlinux -initrd /img/initramfs.gz -append console=ttyS0 sluice.agent=--device,serve " +
		"-chardev file,id=console,path=/run/sluice/guests/web/serial.log -serial chardev:console " +
		"-chardev socket,id=control,path=/run/sluice/guests/web/control.sock,server=on,wait=off -serial chardev:control " +
		"-qmp unix:/run/sluice/guests/web/qmp.sock,server=on,wait=off " +
		"-chardev socket,id=sluice0-chr,path=/run/sluice/vms/web.sock " +
		"-device ivshmem-doorbell,id=sluice0,chardev=sluice0-chr,vectors=6 " +
		"-daemonize -pidfile /run/sluice/guests/web/qemu.pid"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("args:\n got %s\nwant %s", s, want)
	}

	cfg.Endpoint, cfg.MemoryMB = "", 1024
	got, err = cfg.Args(AccelKVM, false)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(got, " ")
	for _, w := range []string{"accel=kvm", "-cpu host", "-m 1024"} {
		if !strings.Contains(s, w) {
			t.Errorf("kvm args lack %q: %s", w, s)
		}
	}
	for _, no := range []string{"ivshmem", "-daemonize"} {
		if strings.Contains(s, no) {
			t.Errorf("args without endpoint or daemonize have %q: %s", no, s)
		}
	}
	if _, err := cfg.Args(AccelAuto, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("auto not resolved: %v", err)
	}
}

func TestArgsVolume(t *testing.T) {
	cfg := Config{Name: "web", Kernel: "/img/vmlinux", RunDir: "/run/g/web", Volume: "/var/lib/sluice/volumes/web"}
	got, err := cfg.Args(AccelTCG, true)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(got, " ")
	want := "-fsdev local,id=volume-fs,path=/var/lib/sluice/volumes/web,security_model=mapped-xattr,fmode=0644,dmode=0755 " +
		"-device virtio-9p-pci,id=volume,fsdev=volume-fs,mount_tag=sluice-volume"
	if !strings.Contains(s, want) {
		t.Errorf("args lack the volume:\n got %s\nwant %s", s, want)
	}
	if !strings.HasSuffix(s, want+" -daemonize -pidfile /run/g/web/qemu.pid") {
		t.Errorf("volume not just before -daemonize: %s", s)
	}
	cfg.Volume = ""
	got, _ = cfg.Args(AccelTCG, false)
	if s := strings.Join(got, " "); strings.Contains(s, "9p") || strings.Contains(s, "fsdev") {
		t.Errorf("args without a volume share one: %s", s)
	}
}

func TestValidate(t *testing.T) {
	ok := Config{Name: "a", Kernel: "/k", RunDir: "/r"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	for _, tt := range []struct {
		name string
		edit func(*Config)
	}{
		{"no name", func(c *Config) { c.Name = "" }},
		{"comma in name", func(c *Config) { c.Name = "a,b" }},
		{"no kernel", func(c *Config) { c.Kernel = "" }},
		{"no run dir", func(c *Config) { c.RunDir = "" }},
		{"tiny memory", func(c *Config) { c.MemoryMB = 16 }},
		{"too many cpus", func(c *Config) { c.CPUs = 65 }},
		{"endpoint without vectors", func(c *Config) { c.Endpoint = "/e.sock" }},
		{"bad accel", func(c *Config) { c.Accel = "hvf" }},
		{"comma in path", func(c *Config) { c.Kernel = "/a,b" }},
		{"long run dir", func(c *Config) { c.RunDir = "/" + strings.Repeat("d", 100) }},
		{"relative volume", func(c *Config) { c.Volume = "volumes/a" }},
		{"comma in volume", func(c *Config) { c.Volume = "/volumes/a,b" }},
	} {
		c := ok
		tt.edit(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tt.name, err)
		}
	}
}

func TestChooseAccel(t *testing.T) {
	vmx := "processor\t: 0\nflags\t\t: fpu vme vmx sse\n"
	plain := "processor\t: 0\nflags\t\t: fpu vme sse hypervisor\n"
	svm := "flags : fpu svm\n"
	for _, tt := range []struct {
		accel, cpuinfo string
		kvm            bool
		want           string
	}{
		{AccelAuto, vmx, true, AccelKVM},
		{AccelAuto, svm, true, AccelKVM},
		{AccelAuto, vmx, false, AccelTCG},  // no /dev/kvm
		{AccelAuto, plain, true, AccelTCG}, // /dev/kvm without vmx/svm: nested kvm_pvm
		{AccelTCG, vmx, true, AccelTCG},    // asked for
		{AccelKVM, plain, false, AccelKVM}, // asked for: QEMU will say why not
		{AccelAuto, "model name: vmx-like\n", true, AccelTCG},
	} {
		if got := ChooseAccel(tt.accel, tt.cpuinfo, tt.kvm); got != tt.want {
			t.Errorf("ChooseAccel(%s, %q, %v) = %s, want %s", tt.accel, tt.cpuinfo, tt.kvm, got, tt.want)
		}
	}
}

// TestArgsIOMMU: a guest with IOMMU boots a q35 machine whose intel-iommu
// comes before the ivshmem device, with the kernel's intel_iommu=on.
func TestArgsIOMMU(t *testing.T) {
	cfg := Config{Name: "web", Kernel: "/img/vmlinux", RunDir: "/run/g/web", Endpoint: "/run/e.sock", Vectors: 6, IOMMU: true}
	got, err := cfg.Args(AccelTCG, false)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(got, " ")
	iommu, ivshmem := strings.Index(s, "-device intel-iommu,intremap=on"), strings.Index(s, "-device ivshmem-doorbell")
	if !strings.Contains(s, "-machine q35,accel=tcg") || iommu < 0 || ivshmem < iommu ||
		!strings.Contains(s, "-append "+DefaultAppend+" intel_iommu=on") {
		t.Errorf("IOMMU args: %s", s)
	}
}
