package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Accelerators.
const (
	AccelAuto = "auto" // KVM where the CPU shows vmx or svm and /dev/kvm opens, else TCG
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
)

// Defaults.
const (
	DefaultBinary   = "qemu-system-x86_64"
	DefaultFirmware = "/usr/share/qemu/qboot.rom" // fastest boot of an uncompressed kernel (PVH)
	DefaultMemoryMB = 256
	DefaultAppend   = "console=ttyS0 quiet panic=-1"
	// DeviceID and ChardevID name the Sluice device and its socket in QEMU,
	// for hot-plug and unplug.
	DeviceID  = "sluice0"
	ChardevID = "sluice0-chr"
)

// The VM's volume, shared with the guest over virtio-9p.
const (
	// VolumeTag is the 9p mount tag the guest mounts the volume by
	// (sluice-init: mount -t 9p -o trans=virtio sluice-volume /volume).
	VolumeTag = "sluice-volume"
	// VolumeSecurityModel is how QEMU maps the guest's file ownership and
	// modes onto the host directory. mapped-xattr keeps the guest's uid, gid
	// and mode in user.virtfs.* extended attributes and creates every host
	// file as QEMU's own user with VolumeFileMode or VolumeDirMode: a guest
	// cannot plant a setuid file, a device node or a file owned by another
	// host user in the volume (passthrough would let it, and needs QEMU as
	// root), and what it writes stays readable to the VM's system-call proxy,
	// whose user namespace maps none of QEMU's ids and so reads as "other".
	// Files the host side creates have no such attributes; the guest sees
	// their host owner and mode, and its root reads them. Start sets a
	// default ACL on the volume first (PrepareVolume): QEMU's -daemonize
	// umask would otherwise cut the modes to 0640 and 0750.
	VolumeSecurityModel = "mapped-xattr"
	VolumeFileMode      = "0644"
	VolumeDirMode       = "0755"
	volumeFsdevID       = "volume-fs"
	volumeDeviceID      = "volume"
)

// ErrInvalid is wrapped by configuration errors.
var ErrInvalid = errors.New("invalid guest configuration")

// Config describes one guest.
type Config struct {
	Name     string // VM name: QEMU's -name and the log's
	Binary   string // QEMU binary (default qemu-system-x86_64)
	Accel    string // auto (default), kvm or tcg
	Kernel   string // uncompressed kernel (make guest-image: vmlinux)
	Initrd   string // initramfs (make guest-image: initramfs.gz)
	Append   string // kernel command line (default console=ttyS0 quiet panic=-1)
	Firmware string // -bios (default qboot if installed, else QEMU's own)
	MemoryMB int    // default 256
	CPUs     int    // default 1
	// Endpoint is the Sluice endpoint's ivshmem server socket and Vectors the
	// MSI vectors its VM needs. An empty Endpoint starts the guest without
	// the device (hot-plug it later with Instance.AttachEndpoint).
	Endpoint string
	Vectors  int
	// Volume is the VM's volume, a host directory the guest sees over
	// virtio-9p with tag VolumeTag (sluice-init mounts it at /volume); ""
	// starts the guest without it. Absolute; it must exist.
	Volume string
	// IOMMU gives the guest a virtual IOMMU (a q35 machine with
	// intel-iommu, the kernel's intel_iommu=on), so that its agent can bind
	// the ivshmem device to vfio-pci and take the MSI-X vectors that signal
	// completions; without it the agent polls. A q35 root bus takes no
	// hot-plugged device: IOMMU and an Endpoint attached later exclude each
	// other.
	IOMMU  bool
	RunDir string // where the sockets, the log and the pid file go
}

// Paths of a run directory.
func (c Config) QMPSocket() string     { return filepath.Join(c.RunDir, "qmp.sock") }
func (c Config) ControlSocket() string { return filepath.Join(c.RunDir, "control.sock") }
func (c Config) SerialLog() string     { return filepath.Join(c.RunDir, "serial.log") }
func (c Config) PIDFile() string       { return filepath.Join(c.RunDir, "qemu.pid") }

func (c Config) withDefaults() Config {
	if c.Binary == "" {
		c.Binary = DefaultBinary
	}
	if c.Accel == "" {
		c.Accel = AccelAuto
	}
	if c.Append == "" {
		c.Append = DefaultAppend
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = DefaultMemoryMB
	}
	if c.CPUs == 0 {
		c.CPUs = 1
	}
	if c.Firmware == "" {
		if _, err := os.Stat(DefaultFirmware); err == nil {
			c.Firmware = DefaultFirmware
		}
	}
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Name == "" || strings.ContainsAny(c.Name, ",=\x00\n"):
		return fmt.Errorf("%w: name %q (empty, or with a character QEMU's option syntax reserves)", ErrInvalid, c.Name)
	case c.Kernel == "":
		return fmt.Errorf("%w: no kernel", ErrInvalid)
	case c.RunDir == "":
		return fmt.Errorf("%w: no run directory", ErrInvalid)
	case c.MemoryMB < 64:
		return fmt.Errorf("%w: memory %d MiB, at least 64", ErrInvalid, c.MemoryMB)
	case c.CPUs < 1 || c.CPUs > 64:
		return fmt.Errorf("%w: %d CPUs, want 1 to 64", ErrInvalid, c.CPUs)
	case c.Endpoint != "" && c.Vectors < 1:
		return fmt.Errorf("%w: endpoint without MSI vectors", ErrInvalid)
	case c.Accel != AccelAuto && c.Accel != AccelKVM && c.Accel != AccelTCG:
		return fmt.Errorf("%w: accelerator %q (want auto, kvm or tcg)", ErrInvalid, c.Accel)
	case c.Volume != "" && !filepath.IsAbs(c.Volume):
		// QEMU opens it after -daemonize moved to /.
		return fmt.Errorf("%w: volume %q is not an absolute path", ErrInvalid, c.Volume)
	}
	for _, p := range []string{c.Kernel, c.Initrd, c.Endpoint, c.RunDir, c.Firmware, c.Volume} {
		if strings.Contains(p, ",") {
			return fmt.Errorf("%w: path %q has a comma (QEMU's option separator)", ErrInvalid, p)
		}
	}
	if len(c.ControlSocket()) > 107 {
		return fmt.Errorf("%w: run directory %q too long for a UNIX socket path", ErrInvalid, c.RunDir)
	}
	return nil
}

// Args is QEMU's command line (without the binary) for accelerator accel
// (kvm or tcg: resolve auto with ChooseAccel first). daemonize makes QEMU
// detach once the machine is built (device errors still reach the caller).
func (c Config) Args(accel string, daemonize bool) ([]string, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if accel != AccelKVM && accel != AccelTCG {
		return nil, fmt.Errorf("%w: accelerator %q (resolve auto first)", ErrInvalid, accel)
	}
	c = c.withDefaults()
	machine, appendArgs := "pc", c.Append
	if c.IOMMU {
		machine, appendArgs = "q35", c.Append+" intel_iommu=on"
	}
	a := []string{
		"-name", "guest=" + c.Name,
		"-machine", machine + ",accel=" + accel,
		"-m", strconv.Itoa(c.MemoryMB),
		"-smp", strconv.Itoa(c.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
	}
	if c.IOMMU { // before the PCI devices it translates
		a = append(a, "-device", "intel-iommu,intremap=on")
	}
	if accel == AccelKVM {
		a = append(a, "-cpu", "host")
	}
	if c.Firmware != "" {
		a = append(a, "-bios", c.Firmware)
	}
	a = append(a, "-kernel", c.Kernel)
	if c.Initrd != "" {
		a = append(a, "-initrd", c.Initrd)
	}
	a = append(a, "-append", appendArgs,
		// ttyS0: the console, to the log; ttyS1: the agent's control port.
		"-chardev", "file,id=console,path="+c.SerialLog(),
		"-serial", "chardev:console",
		"-chardev", "socket,id=control,path="+c.ControlSocket()+",server=on,wait=off",
		"-serial", "chardev:control",
		"-qmp", "unix:"+c.QMPSocket()+",server=on,wait=off",
	)
	if c.Endpoint != "" {
		a = append(a,
			"-chardev", "socket,id="+ChardevID+",path="+c.Endpoint,
			"-device", fmt.Sprintf("ivshmem-doorbell,id=%s,chardev=%s,vectors=%d", DeviceID, ChardevID, c.Vectors),
		)
	}
	if c.Volume != "" {
		a = append(a, volumeArgs(c.Volume)...)
	}
	if daemonize {
		a = append(a, "-daemonize", "-pidfile", c.PIDFile())
	}
	return a, nil
}

// volumeArgs share dir with the guest: a local fsdev under
// VolumeSecurityModel and a virtio-9p device carrying VolumeTag.
func volumeArgs(dir string) []string {
	return []string{
		"-fsdev", fmt.Sprintf("local,id=%s,path=%s,security_model=%s,fmode=%s,dmode=%s",
			volumeFsdevID, dir, VolumeSecurityModel, VolumeFileMode, VolumeDirMode),
		"-device", fmt.Sprintf("virtio-9p-pci,id=%s,fsdev=%s,mount_tag=%s", volumeDeviceID, volumeFsdevID, VolumeTag),
	}
}

// ChooseAccel resolves auto: KVM when cpuinfo (the text of /proc/cpuinfo)
// shows hardware virtualization (vmx or svm) and /dev/kvm opens, else TCG.
// A /dev/kvm without vmx/svm (nested, paravirtual KVM such as kvm_pvm) is
// not enough to boot Linux guests.
func ChooseAccel(accel, cpuinfo string, kvmOpens bool) string {
	if accel != AccelAuto {
		return accel
	}
	if kvmOpens && HasVirtFlag(cpuinfo) {
		return AccelKVM
	}
	return AccelTCG
}

// HasVirtFlag reports whether cpuinfo (the text of /proc/cpuinfo) shows
// hardware virtualization: the vmx (Intel) or svm (AMD) CPU flag.
func HasVirtFlag(cpuinfo string) bool {
	for _, line := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) != "flags" {
			continue
		}
		for _, f := range strings.Fields(v) {
			if f == "vmx" || f == "svm" {
				return true
			}
		}
	}
	return false
}

// HostAccel is ChooseAccel on this host.
func HostAccel(accel string) string {
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	kvm := false
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err == nil {
		f.Close()
		kvm = true
	}
	return ChooseAccel(accel, string(cpuinfo), kvm)
}
