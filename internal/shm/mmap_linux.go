package shm

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Map maps size bytes of fd shared, read-write.
func Map(fd int, size int) ([]byte, error) {
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of fd %d: %w", size, fd, err)
	}
	return b, nil
}

// MapFile maps size bytes at offset off of the file at path (a sysfs PCI
// resource, say), shared, read-write.
func MapFile(path string, off int64, size int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_SYNC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer unix.Close(fd)
	b, err := unix.Mmap(fd, off, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of %s: %w", size, path, err)
	}
	return b, nil
}

// Unmap releases a mapping made by Map or MapFile.
func Unmap(b []byte) error {
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("unmapping: %w", err)
	}
	return nil
}

// NewMemfd creates an anonymous shared-memory file of size bytes, sealed
// against shrinking so a peer that maps it cannot be SIGBUSed by a truncate.
func NewMemfd(name string, size int64) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create %q: %w", name, err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sizing memfd %q to %d: %w", name, size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sealing memfd %q: %w", name, err)
	}
	return fd, nil
}
