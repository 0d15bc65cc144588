package libvirt

import (
	"fmt"
	"path/filepath"
	"regexp"
)

// Domain types: the accelerator libvirt starts QEMU with.
const (
	DomainTypeKVM  = "kvm"  // hardware virtualization; needs vmx or svm
	DomainTypeQEMU = "qemu" // TCG, pure emulation; works everywhere
)

// Defaults of ExampleDomain.
const (
	DefaultMemoryMiB = 256
	DefaultArch      = "x86_64"
	// DefaultMachine is i440fx: qboot and an uncompressed kernel boot on it
	// in about two seconds under TCG.
	DefaultMachine = "pc"
	// QbootROM is where Debian's qemu-system-x86 ships qboot, the fast
	// firmware for direct kernel boot.
	QbootROM = "/usr/share/qemu/qboot.rom"
	// DefaultCmdline is the guest image's kernel command line: the serial
	// console, and the guest agent's device check at boot.
	DefaultCmdline = "console=ttyS0 quiet panic=-1 sluice.agent=--device,info"
)

// VMInfo is what a domain needs to know of a VM in sluiced.
type VMInfo struct {
	Endpoint string   // the ivshmem server socket
	Vectors  uint     // MSI vectors the device needs
	Volume   string   // host directory shared over virtio-9p (FilesystemFor); "": none
	Settings Settings // written to the domain's metadata for the hook
}

// ShmemFor is the Sluice device for vm: an ivshmem-doorbell device whose
// server is the VM's endpoint, with the VM's MSI vectors and ioeventfd on
// so that doorbell writes reach sluiced without a QEMU exit.
func ShmemFor(vm VMInfo) DomainShmem {
	return DomainShmem{
		Name:   ShmemName,
		Model:  &DomainShmemModel{Type: ShmemModel},
		Server: &DomainShmemServer{Path: vm.Endpoint},
		MSI:    &DomainShmemMSI{Vectors: vm.Vectors, IOEventFD: "on"},
	}
}

// SerialFor is serial port 0: written to logPath, or a pty when logPath is
// empty. libvirt adds the matching <console> itself.
func SerialFor(logPath string) DomainSerial {
	src := &DomainChardevSource{Pty: &DomainChardevSourcePty{}}
	if logPath != "" {
		src = &DomainChardevSource{File: &DomainChardevSourceFile{Path: logPath}}
	}
	port := uint(0)
	return DomainSerial{Source: src, Target: &DomainSerialTarget{Port: &port}}
}

// DomainOptions describe the guest ExampleDomain builds. Zero fields take
// the defaults named on them.
type DomainOptions struct {
	Name      string // domain name; required
	UUID      string // optional; libvirt generates one
	Type      string // DomainTypeKVM or DomainTypeQEMU; default qemu
	MemoryMiB uint64 // default DefaultMemoryMiB
	VCPUs     uint   // default 1
	Machine   string // default DefaultMachine
	Loader    string // firmware ROM, absolute (e.g. QbootROM); "": QEMU's default (SeaBIOS)
	Kernel    string // absolute path of the kernel; required
	Initrd    string // absolute path of the initramfs; optional
	Cmdline   string // kernel command line
	SerialLog string // absolute path the serial console is written to; "": a pty
	Emulator  string // absolute path of QEMU; "": libvirt's default
	VM        VMInfo // the Sluice device and settings
}

// libvirt's objectNameWithSlash minus the slash; sluiced is stricter still.
var domainName = regexp.MustCompile(`^[^\n]+$`)

// Validate checks what libvirt would otherwise refuse later, with less
// context.
func (o DomainOptions) Validate() error {
	if !domainName.MatchString(o.Name) {
		return fmt.Errorf("domain name %q: want one line of text: %w", o.Name, ErrInvalid)
	}
	switch o.Type {
	case "", DomainTypeKVM, DomainTypeQEMU:
	default:
		return fmt.Errorf("domain type %q: want %s or %s: %w", o.Type, DomainTypeKVM, DomainTypeQEMU, ErrInvalid)
	}
	if o.Kernel == "" {
		return fmt.Errorf("domain %q: no kernel: %w", o.Name, ErrInvalid)
	}
	for _, p := range []struct{ what, path string }{
		{"kernel", o.Kernel}, {"initrd", o.Initrd}, {"loader", o.Loader},
		{"serial log", o.SerialLog}, {"emulator", o.Emulator}, {"endpoint", o.VM.Endpoint}, {"volume", o.VM.Volume},
	} {
		if p.path != "" && !filepath.IsAbs(p.path) {
			return fmt.Errorf("%s path %q: libvirt wants an absolute path: %w", p.what, p.path, ErrInvalid)
		}
	}
	if o.VM.Endpoint == "" {
		return fmt.Errorf("domain %q: no sluice endpoint: %w", o.Name, ErrInvalid)
	}
	return nil
}

// ExampleDomain builds a whole guest that boots a kernel directly and uses
// Sluice (its <shmem> device and, where the VM has one, its volume as a
// virtio-9p <filesystem>): a guest power-off, reboot or crash ends the domain (so that the
// release hook runs and the VM's endpoint goes away), and the serial console
// goes to a log file. Call Validate first.
func ExampleDomain(o DomainOptions) Domain {
	o = o.withDefaults()
	d := Domain{
		Type:       o.Type,
		Name:       o.Name,
		UUID:       o.UUID,
		Memory:     &DomainMemory{Value: o.MemoryMiB, Unit: "MiB"},
		VCPU:       &DomainVCPU{Value: o.VCPUs},
		OS:         osFor(o),
		Features:   &DomainFeatureList{ACPI: &DomainFeature{}},
		Clock:      &DomainClock{Offset: "utc"},
		OnPoweroff: "destroy",
		OnReboot:   "destroy",
		OnCrash:    "destroy",
		Devices: &DomainDeviceList{
			Emulator:   o.Emulator,
			Serials:    []DomainSerial{SerialFor(o.SerialLog)},
			Shmems:     []DomainShmem{ShmemFor(o.VM)},
			MemBalloon: &DomainMemBalloon{Model: "none"},
		},
	}
	if fs, ok := FilesystemFor(o.VM); ok {
		d.Devices.Filesystems = []DomainFilesystem{fs}
	}
	if !o.VM.Settings.IsZero() {
		d.Metadata = SluiceMetadata(o.VM.Settings)
	}
	return d
}

func (o DomainOptions) withDefaults() DomainOptions {
	if o.Type == "" {
		o.Type = DomainTypeQEMU
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = DefaultMemoryMiB
	}
	if o.VCPUs == 0 {
		o.VCPUs = 1
	}
	if o.Machine == "" {
		o.Machine = DefaultMachine
	}
	return o
}

// osFor boots the kernel directly, with Loader as firmware when set.
func osFor(o DomainOptions) *DomainOS {
	os := &DomainOS{
		Type:    &DomainOSType{Arch: DefaultArch, Machine: o.Machine, Type: "hvm"},
		Kernel:  o.Kernel,
		Initrd:  o.Initrd,
		Cmdline: o.Cmdline,
	}
	if o.Loader != "" {
		os.Loader = &DomainLoader{Path: o.Loader, Type: "rom"}
	}
	return os
}
