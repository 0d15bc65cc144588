package proxy

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The socket calls with address arguments, on buffers the proxy owns (the
// address, copied out of the heap) or the guest's heap (the data). Go's
// wrappers want a Sockaddr type; these pass the guest's bytes as they are.

func ptr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&b[0]))
}

func rawConnect(fd int, sa []byte) error {
	_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), ptr(sa), uintptr(len(sa)))
	return errOrNil(e)
}

func rawSendto(fd int, b []byte, flags int, sa []byte) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), ptr(b), uintptr(len(b)), uintptr(flags), ptr(sa), uintptr(len(sa)))
	return int(n), errOrNil(e)
}

// rawRecvfrom receives into b; with sa non-nil it fills sa with the
// sender's address and returns the address's full length.
func rawRecvfrom(fd int, b []byte, flags int, sa []byte) (int, uint32, error) {
	salen := uint32(len(sa))
	var lp uintptr
	if sa != nil {
		lp = uintptr(unsafe.Pointer(&salen))
	}
	n, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), ptr(b), uintptr(len(b)), uintptr(flags), ptr(sa), lp)
	return int(n), salen, errOrNil(e)
}

func errOrNil(e unix.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}
