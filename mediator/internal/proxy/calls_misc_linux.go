package proxy

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// Sizes of the structs these calls write into the heap (Linux x86-64).
const (
	TimespecSize = 16
	RusageSize   = 144
)

// clock_gettime(clockid, tp)
func sysClockGettime(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	b, e := heapRange(c.heap, r.Args[1], TimespecSize)
	if e != 0 {
		return 0, e
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(r.Args[0]), &ts); err != nil {
		return 0, abi.ErrnoOf(err)
	}
	var s [TimespecSize]byte
	putTimespec(s[:], ts)
	copy(b, s[:])
	return 0, 0
}

// getrusage(who, usage) answers for the VM, not the proxy: ru_utime is the
// VM's GPU time (the mediator's accounting, passed in Request.Aux in ns),
// ru_stime the proxy's own CPU time (user + system: the host CPU the VM's
// system calls cost), every other field 0. who is RUSAGE_SELF or
// RUSAGE_THREAD (the same answer); anything else is EINVAL.
func sysGetrusage(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	switch int32(r.Args[0]) {
	case unix.RUSAGE_SELF, unix.RUSAGE_THREAD:
	default:
		return 0, abi.ErrnoINVAL
	}
	b, e := heapRange(c.heap, r.Args[1], RusageSize)
	if e != 0 {
		return 0, e
	}
	var self unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &self); err != nil {
		return 0, abi.ErrnoOf(err)
	}
	cpu := time.Duration(self.Utime.Nano() + self.Stime.Nano())
	var s [RusageSize]byte
	putTimeval(s[0:], time.Duration(r.Aux))
	putTimeval(s[16:], cpu)
	copy(b, s[:])
	return 0, 0
}

func putTimeval(b []byte, d time.Duration) {
	le.PutUint64(b[0:], uint64(d/time.Second))
	le.PutUint64(b[8:], uint64(d%time.Second/time.Microsecond))
}

// fastcall_register(op, fd, heap offset, length, file offset) checks a
// curried call in the request's context: op one of pread64, pwrite64, read,
// write (EINVAL), fd open in the context and open for the op's direction
// (EBADF), the heap range (EFAULT), a file offset that is no negative off_t
// (EINVAL). It answers with a MsgFastcall carrying a dup of fd (SCM_RIGHTS)
// instead of a Result: the mediator keeps the table and runs fastcalls
// itself.
func sysFastcallRegister(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	op, heapOff, n, fileOff := r.Args[0], r.Args[2], r.Args[3], r.Args[4]
	var reads bool
	switch op {
	case uint64(abi.SysPread64), uint64(abi.SysRead):
		reads = true
	case uint64(abi.SysPwrite64), uint64(abi.SysWrite):
	default:
		return 0, abi.ErrnoINVAL
	}
	if int64(fileOff) < 0 {
		return 0, abi.ErrnoINVAL
	}
	fd, e := c.fd(r.Args[1])
	if e != 0 {
		return 0, e
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return 0, abi.ErrnoOf(err)
	}
	if acc := fl & unix.O_ACCMODE; reads && acc == unix.O_WRONLY || !reads && acc == unix.O_RDONLY {
		return 0, abi.ErrnoBADF
	}
	if _, e := heapRange(c.heap, heapOff, n); e != 0 {
		return 0, e
	}
	msg := proxyproto.AppendFastcall(nil, proxyproto.Fastcall{
		Slot: r.Slot, Seq: r.Seq, Op: uint16(op), HeapOff: heapOff, Length: n, FileOff: fileOff,
	})
	if err := sendWithFD(c.connFD, msg, fd); err != nil {
		return 0, abi.ErrnoOf(err)
	}
	return 0, answered
}

// sendWithFD sends msg and a copy of fd on the socket sock (non-blocking:
// it shares Go's open file description), waiting for room.
func sendWithFD(sock int, msg []byte, fd int) error {
	oob := unix.UnixRights(fd)
	for {
		err := unix.Sendmsg(sock, msg, oob, nil, 0)
		if err != unix.EAGAIN && err != unix.EINTR {
			return err
		}
		pfd := []unix.PollFd{{Fd: int32(sock), Events: unix.POLLOUT}}
		if _, err := unix.Poll(pfd, -1); err != nil && err != unix.EINTR {
			return err
		}
	}
}
