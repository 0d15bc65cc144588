package vm

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"time"
	"unsafe"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/internal/syscalls"
	"golang.org/x/sys/unix"
)

// sysRingSize is the size of the file the syscall forwarder stores its
// request ring's head in: a page, the head its first 8 bytes. The file is
// the host's alone (no guest maps it) and lives in the fd store, so that
// a successor after a crash reads the ring on from where the crashed
// forwarder took its last call (syscalls.Spec.HeadStore).
const sysRingSize = 4096

// sysRing is that file and its mapping; fd -1: none.
type sysRing struct {
	fd  int
	mem []byte
}

// head is the stored head's word.
func (r *sysRing) head() *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[0])) }

// openSysRing makes (or, handed over, adopts) the VM's head file when it
// serves system calls and has an fd store, and stores a new one.
func (v *VM) openSysRing() error {
	if !v.serveSyscalls() || v.cfg.Store == nil {
		return nil
	}
	var err error
	if a := v.cfg.Adopt; a != nil && a.SysRing > 0 {
		if err = adoptMemfd(a.SysRing, sysRingSize); err != nil {
			return err
		}
		v.sysRing.fd = a.SysRing
	} else if v.sysRing.fd, err = shm.NewMemfd("sluice-"+v.cfg.Name+"-sysring", sysRingSize); err != nil {
		return err
	}
	if v.sysRing.mem, err = shm.Map(v.sysRing.fd, sysRingSize); err != nil {
		return err
	}
	*v.sysRing.head() = v.adoptedHead()
	if a := v.cfg.Adopt; a == nil || a.SysRing <= 0 {
		if err := v.cfg.Store.Store(storeName(v.cfg.Name, "sysring"), v.sysRing.fd); err != nil {
			slog.Warn("fd store: the syscall ring's head file is not stored; a crash would disconnect the vm's guests", "vm", v.cfg.Name, "err", err)
		}
	}
	return nil
}

// answerOrphans answers, after a crash, the calls the crashed forwarder
// took and never answered (syscalls.Orphans), before the new one starts,
// which must not serve them (syscalls.Spec.Answered).
func (v *VM) answerOrphans(head uint64) []syscalls.SlotCall {
	if a := v.cfg.Adopt; a == nil || !a.Orphans {
		return nil
	}
	l := v.cfg.Layout
	area := shm.New(v.region.Bytes(l.SyscallOff, l.SyscallSize))
	answered := syscalls.Orphans(area, int(l.SyscallSlots), head, time.Duration(abi.SyscallRingHoleNs))
	if len(answered) > 0 {
		slog.Warn("system calls the crashed daemon took and never answered fail with EIO", "vm", v.cfg.Name, "calls", len(answered))
	}
	return answered
}

// closeSysRing unmaps and closes the head file (not handed over).
func (v *VM) closeSysRing() error {
	var err error
	if v.sysRing.mem != nil {
		err = shm.Unmap(v.sysRing.mem)
		v.sysRing.mem = nil
	}
	if v.sysRing.fd >= 0 {
		if cerr := unix.Close(v.sysRing.fd); err == nil {
			err = cerr
		}
		v.sysRing.fd = -1
	}
	if err != nil {
		return fmt.Errorf("closing the syscall ring's head file: %w", err)
	}
	return nil
}

// storedHead reads the head a crashed forwarder stored in fd (FromStore).
func storedHead(fd int) (uint64, error) {
	var b [8]byte
	if n, err := unix.Pread(fd, b[:], 0); err != nil || n != len(b) {
		return 0, fmt.Errorf("reading the stored syscall ring head: %d bytes, %v", n, err)
	}
	return binary.NativeEndian.Uint64(b[:]), nil // as the forwarder stored it
}

// StoredHead reports whether stored (descriptors a store passed back)
// holds VM name's syscall ring head file: without it a VM serving system
// calls cannot be taken over after a crash (its ring would be read again
// from 0, running calls twice).
func StoredHead(name string, stored map[string][]int) bool {
	return len(stored[storeName(name, "sysring")]) > 0
}
