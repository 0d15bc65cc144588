//go:build linux

package pci

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// VFIO's ioctls (linux/vfio.h): _IO(';', 100 + n); each passes a pointer to
// its struct (or an int, or a string) and returns an int.
const (
	vfioGetAPIVersion     = 0x3b64
	vfioCheckExtension    = 0x3b65
	vfioSetIOMMU          = 0x3b66
	vfioGroupGetStatus    = 0x3b67
	vfioGroupSetContainer = 0x3b68
	vfioGroupGetDeviceFD  = 0x3b6a
	vfioDeviceRegionInfo  = 0x3b6c
	vfioDeviceIRQInfo     = 0x3b6d
	vfioDeviceSetIRQs     = 0x3b6e
)

// vfioGroupStatus is struct vfio_group_status.
type vfioGroupStatus struct{ Argsz, Flags uint32 }

// vfioRegionInfo is struct vfio_region_info.
type vfioRegionInfo struct {
	Argsz, Flags, Index, CapOffset uint32
	Size, Offset                   uint64
}

// vfioIRQInfo is struct vfio_irq_info.
type vfioIRQInfo struct{ Argsz, Flags, Index, Count uint32 }

// vfioIRQSetHeader is struct vfio_irq_set without its data.
type vfioIRQSetHeader struct{ Argsz, Flags, Index, Start, Count uint32 }

const vfioIRQSetHeaderSize = 20

// ioctlInt is an ioctl whose argument is a plain integer.
func ioctlInt(fd int, req uint, arg uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), arg)
	if errno != 0 {
		return int(r), errno
	}
	return int(r), nil
}

// ioctlPtr is an ioctl on the struct at p.
func ioctlPtr[T any](fd int, req uint, p *T) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(p)))
	if errno != 0 {
		return int(r), errno
	}
	return int(r), nil
}

// groupSetContainer hands the group its container, by fd.
func groupSetContainer(group, container int) error {
	c := int32(container)
	_, err := ioctlPtr(group, vfioGroupSetContainer, &c)
	return err
}

// groupDeviceFD opens the group's device named addr (a PCI address).
func groupDeviceFD(group int, addr string) (int, error) {
	name, err := unix.BytePtrFromString(addr)
	if err != nil {
		return -1, err
	}
	return ioctlPtr(group, vfioGroupGetDeviceFD, name)
}

// setIRQs is VFIO_DEVICE_SET_IRQS on irq index from vector start, with fds
// as its eventfd data (-1: none), or without data when fds is empty.
func setIRQs(dev int, index, start uint32, fds []int32, flags uint32) error {
	b := make([]byte, vfioIRQSetHeaderSize+4*len(fds))
	h := (*vfioIRQSetHeader)(unsafe.Pointer(&b[0]))
	*h = vfioIRQSetHeader{Argsz: uint32(len(b)), Flags: flags, Index: index, Start: start, Count: uint32(len(fds))}
	for i, fd := range fds {
		*(*int32)(unsafe.Pointer(&b[vfioIRQSetHeaderSize+4*i])) = fd
	}
	_, err := ioctlPtr(dev, vfioDeviceSetIRQs, &b[0])
	return err
}
