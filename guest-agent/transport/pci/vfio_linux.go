package pci

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrNoInterrupts means the device cannot signal this process: it is not
// bound to vfio-pci, or the guest's kernel has no VFIO for it (no IOMMU and
// no no-IOMMU mode). Its waiters poll.
var ErrNoInterrupts = errors.New("no interrupts in user space")

// VFIODriver is the driver that hands the device's MSI-X vectors to user
// space as eventfds.
const VFIODriver = "vfio-pci"

// DefaultDevRoot is where devtmpfs is mounted (VFIO's group files are in
// its vfio/).
const DefaultDevRoot = "/dev"

// Constants of linux/vfio.h.
const (
	vfioAPIVersion     = 0
	vfioType1IOMMU     = 1
	vfioType1v2IOMMU   = 3
	vfioNoIOMMU        = 8
	vfioGroupViable    = 1
	vfioRegionMmap     = 1 << 2
	vfioPCIMSIXIndex   = 2
	vfioPCIConfigIndex = 7
	pciCommand         = 4
	pciCommandMaster   = 1 << 2
	vfioIRQDataNone    = 1 << 0
	vfioIRQDataEventfd = 1 << 2
	vfioIRQTrigger     = 1 << 5
	maxMSIXVectors     = 2048
)

// vfioDevice is a device opened through VFIO: its container, group and
// device fds.
type vfioDevice struct {
	container, group, dev int
}

// BindVFIO hands dev to vfio-pci (driver_override, then unbinding it from
// the driver it has, then drivers_probe), as an init does before the agent
// runs. root is where sysfs is mounted. A device bound already is left as it
// is.
func BindVFIO(root string, dev Device) error {
	if driver(dev) == VFIODriver {
		return nil
	}
	if err := writeAttr(filepath.Join(dev.Path, "driver_override"), VFIODriver); err != nil {
		return fmt.Errorf("binding %s to %s: %w", dev.Address, VFIODriver, err)
	}
	if driver(dev) != "" {
		if err := writeAttr(filepath.Join(dev.Path, "driver", "unbind"), dev.Address); err != nil {
			return fmt.Errorf("unbinding %s: %w", dev.Address, err)
		}
	}
	if err := writeAttr(filepath.Join(root, "bus", "pci", "drivers_probe"), dev.Address); err != nil {
		return fmt.Errorf("binding %s to %s (is the module loaded, and is there an IOMMU?): %w", dev.Address, VFIODriver, err)
	}
	return nil
}

// driver is the name of the driver dev is bound to; "" for none.
func driver(dev Device) string {
	l, err := os.Readlink(filepath.Join(dev.Path, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(l)
}

// writeAttr writes s to a sysfs attribute in one write.
func writeAttr(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(s))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// groupPath is the VFIO group file of dev under devRoot: vfio/N for a device
// behind an IOMMU, vfio/noiommu-N in no-IOMMU mode; noIOMMU says which.
func groupPath(devRoot string, dev Device) (path string, noIOMMU bool, err error) {
	if d := driver(dev); d != VFIODriver {
		if d == "" {
			d = "no driver"
		}
		return "", false, fmt.Errorf("%s is bound to %s, not %s: %w", dev.Address, d, VFIODriver, ErrNoInterrupts)
	}
	l, err := os.Readlink(filepath.Join(dev.Path, "iommu_group"))
	if err != nil {
		return "", false, fmt.Errorf("%s has no IOMMU group: %w", dev.Address, ErrNoInterrupts)
	}
	n := filepath.Base(l)
	for _, name := range []string{n, "noiommu-" + n} {
		p := filepath.Join(devRoot, "vfio", name)
		if _, err := os.Stat(p); err == nil {
			return p, name != n, nil
		}
	}
	return "", false, fmt.Errorf("%s: no %s/vfio/%s: %w", dev.Address, devRoot, n, ErrNoInterrupts)
}

// openVFIO opens dev through VFIO: a container with the IOMMU type the group
// needs (the device does no DMA, so nothing is mapped in it), the group and
// the device.
func openVFIO(devRoot string, dev Device) (*vfioDevice, error) {
	gpath, noIOMMU, err := groupPath(devRoot, dev)
	if err != nil {
		return nil, err
	}
	v := &vfioDevice{container: -1, group: -1, dev: -1}
	if err := v.open(devRoot, gpath, noIOMMU, dev.Address); err != nil {
		v.close()
		return nil, fmt.Errorf("opening %s through VFIO: %w", dev.Address, err)
	}
	return v, nil
}

func (v *vfioDevice) open(devRoot, gpath string, noIOMMU bool, addr string) error {
	var err error
	if v.container, err = unix.Open(filepath.Join(devRoot, "vfio", "vfio"), unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		return fmt.Errorf("container: %w", err)
	}
	if api, err := ioctlInt(v.container, vfioGetAPIVersion, 0); err != nil || api != vfioAPIVersion {
		return fmt.Errorf("VFIO API version %d (%v), want %d", api, err, vfioAPIVersion)
	}
	if v.group, err = unix.Open(gpath, unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("group %s: %w (another process has the device open: one agent at a time)", gpath, err)
		}
		return fmt.Errorf("group %s: %w", gpath, err)
	}
	st := vfioGroupStatus{Argsz: 8}
	if _, err := ioctlPtr(v.group, vfioGroupGetStatus, &st); err != nil {
		return fmt.Errorf("group status: %w", err)
	}
	if st.Flags&vfioGroupViable == 0 {
		return fmt.Errorf("group %s is not viable: another device of it is bound to a host driver", gpath)
	}
	if err := groupSetContainer(v.group, v.container); err != nil {
		return fmt.Errorf("setting the container: %w", err)
	}
	iommu := uintptr(vfioNoIOMMU)
	if !noIOMMU {
		iommu = vfioType1v2IOMMU
		if ok, _ := ioctlInt(v.container, vfioCheckExtension, iommu); ok != 1 {
			iommu = vfioType1IOMMU
		}
	}
	if _, err := ioctlInt(v.container, vfioSetIOMMU, iommu); err != nil {
		return fmt.Errorf("setting IOMMU type %d: %w", iommu, err)
	}
	if v.dev, err = groupDeviceFD(v.group, addr); err != nil {
		return fmt.Errorf("getting the device: %w", err)
	}
	return nil
}

// region describes the device's region (BAR) n.
func (v *vfioDevice) region(n int) (vfioRegionInfo, error) {
	ri := vfioRegionInfo{Argsz: 32, Index: uint32(n)}
	if _, err := ioctlPtr(v.dev, vfioDeviceRegionInfo, &ri); err != nil {
		return ri, fmt.Errorf("BAR%d info: %w", n, err)
	}
	return ri, nil
}

// mapBAR maps BAR n whole, or reports ok false when VFIO will not map it (a
// BAR smaller than a page that shares its page).
func (v *vfioDevice) mapBAR(n int) (b []byte, ok bool, err error) {
	ri, err := v.region(n)
	if err != nil {
		return nil, false, err
	}
	if ri.Size == 0 || ri.Size > 1<<40 {
		return nil, false, fmt.Errorf("BAR%d: unusable size %d", n, ri.Size)
	}
	if ri.Flags&vfioRegionMmap == 0 {
		return nil, false, nil
	}
	b, err = unix.Mmap(v.dev, int64(ri.Offset), int(ri.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, false, fmt.Errorf("mapping BAR%d: %w", n, err)
	}
	return b, true, nil
}

// reg32 reads the 32-bit register at off of BAR0 with pread.
func (v *vfioDevice) reg32(bar0 vfioRegionInfo, off int) (uint32, error) {
	var b [4]byte
	if _, err := unix.Pread(v.dev, b[:], int64(bar0.Offset)+int64(off)); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// setReg32 writes the 32-bit register at off of BAR0 with pwrite, one
// 4-byte access as the ivshmem registers need.
func (v *vfioDevice) setReg32(bar0 vfioRegionInfo, off int, val uint32) error {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], val)
	_, err := unix.Pwrite(v.dev, b[:], int64(bar0.Offset)+int64(off))
	return err
}

// enableBusMaster sets the Bus Master bit of the device's PCI command
// register, as a driver does: QEMU drops a device's MSI-X writes without it
// (a device's interrupts are writes it masters), and vfio-pci leaves it to
// user space.
func (v *vfioDevice) enableBusMaster() error {
	ri, err := v.region(vfioPCIConfigIndex)
	if err != nil {
		return err
	}
	var b [2]byte
	if _, err := unix.Pread(v.dev, b[:], int64(ri.Offset)+pciCommand); err != nil {
		return fmt.Errorf("reading the PCI command register: %w", err)
	}
	cmd := binary.LittleEndian.Uint16(b[:])
	if cmd&pciCommandMaster != 0 {
		return nil
	}
	binary.LittleEndian.PutUint16(b[:], cmd|pciCommandMaster)
	if _, err := unix.Pwrite(v.dev, b[:], int64(ri.Offset)+pciCommand); err != nil {
		return fmt.Errorf("enabling bus mastering: %w", err)
	}
	return nil
}

// msixVectors is how many MSI-X vectors the device has.
func (v *vfioDevice) msixVectors() (int, error) {
	info := vfioIRQInfo{Argsz: 16, Index: vfioPCIMSIXIndex}
	if _, err := ioctlPtr(v.dev, vfioDeviceIRQInfo, &info); err != nil {
		return 0, fmt.Errorf("MSI-X info: %w", err)
	}
	if info.Count == 0 || info.Count > maxMSIXVectors {
		return 0, fmt.Errorf("MSI-X with %d vectors: %w", info.Count, ErrNoInterrupts)
	}
	return int(info.Count), nil
}

// close releases the device, its group and container (the device first:
// VFIO tears MSI-X down with it).
func (v *vfioDevice) close() error {
	var errs []error
	for _, fd := range []*int{&v.dev, &v.group, &v.container} {
		if *fd >= 0 {
			errs = append(errs, unix.Close(*fd))
			*fd = -1
		}
	}
	return errors.Join(errs...)
}
