package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kept are the capabilities the proxy keeps (inside its user namespace)
// once its root is set up: what switching a context's identity and serving
// files as the sandbox's root need. Everything else (CAP_SYS_ADMIN,
// CAP_NET_ADMIN, CAP_NET_RAW, CAP_MKNOD, ...) leaves the bounding, permitted,
// effective and inheritable sets of every thread, so a compromised proxy
// cannot reach the kernel code those gate even where seccomp lets a call
// through.
var Kept = []uintptr{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH,
	unix.CAP_FOWNER, unix.CAP_FSETID, unix.CAP_SETGID, unix.CAP_SETUID,
}

// DropCapabilities keeps only Kept, on every thread of the process; last is
// the kernel's highest capability (LastCap, read while /proc is there).
func DropCapabilities(last uintptr) error {
	var keep uint64
	for _, c := range Kept {
		keep |= 1 << c
	}
	for c := uintptr(0); c <= last; c++ {
		if keep&(1<<c) != 0 {
			continue
		}
		if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); e != 0 {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, e)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	data[0].Effective, data[0].Permitted, data[0].Inheritable = uint32(keep), uint32(keep), uint32(keep)
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	if e != 0 {
		return fmt.Errorf("setting the capabilities: %w", e)
	}
	return nil
}

// LastCap is the kernel's highest capability number, from /proc (read it
// before the root is switched: the sandbox has no /proc).
func LastCap() (uintptr, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("reading the kernel's last capability: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n > 63 {
		return 0, fmt.Errorf("reading cap_last_cap: %q", b)
	}
	return uintptr(n), nil
}
