package syscalls

import (
	"fmt"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
	"golang.org/x/sys/unix"
)

// fastTable is a VM's curried calls, indexed by the low bits of a fastcall
// number; gen is bumped by each revocation.
type fastTable struct {
	e [abi.MaxFastcalls]fastEntry
}

type fastEntry struct {
	fd  int // -1 or 0 when unused (0 is never handed over: stdin)
	gen uint32
	op  uint16
	buf []byte // the pre-checked heap range
	off int64
}

func (t *fastTable) closeAll() {
	for i := range t.e {
		if t.e[i].fd > 0 {
			unix.Close(t.e[i].fd)
			t.e[i].fd = 0
		}
	}
}

// addFastcall takes a registration the proxy validated and answers its slot
// with the new fastcall number.
func (f *Forwarder) addFastcall(msg, oob []byte) error {
	fc, err := proxyproto.DecodeFastcall(msg)
	if err != nil {
		return err
	}
	fd, err := onlyFD(oob)
	if err != nil {
		return err
	}
	num, errno := f.installFastcall(fc, fd)
	f.mu.Lock()
	seen, claimed := f.claimLocked(fc.Slot, fc.Seq)
	f.mu.Unlock()
	if !claimed {
		if errno == 0 {
			f.revokeFastcall(uint64(num))
		}
		return nil
	}
	if errno != 0 {
		f.finish(fc.Slot, fc.Seq, -1, errno, seen, f.now())
		return nil
	}
	f.finish(fc.Slot, fc.Seq, int64(num), 0, seen, f.now())
	return nil
}

func closeRights(oob []byte) {
	cms, _ := unix.ParseSocketControlMessage(oob)
	for i := range cms {
		fds, _ := unix.ParseUnixRights(&cms[i])
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

func onlyFD(oob []byte) (int, error) {
	cms, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(cms) != 1 {
		return -1, fmt.Errorf("%w: fastcall without its descriptor", proxyproto.ErrMessage)
	}
	fds, err := unix.ParseUnixRights(&cms[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("%w: fastcall with %d descriptors", proxyproto.ErrMessage, len(fds))
	}
	return fds[0], nil
}

// installFastcall puts a validated call in a free entry; the table owns fd
// from here (closed on failure).
func (f *Forwarder) installFastcall(fc proxyproto.Fastcall, fd int) (uint16, abi.Errno) {
	switch fc.Op {
	case abi.SysPread64, abi.SysPwrite64, abi.SysRead, abi.SysWrite:
	default:
		unix.Close(fd)
		return 0, abi.ErrnoINVAL
	}
	if !(abi.Layout{HeapSize: uint64(len(f.spec.Heap))}).HeapRange(fc.HeapOff, fc.Length) || fc.FileOff > 1<<62 {
		unix.Close(fd)
		return 0, abi.ErrnoFAULT
	}
	// Only regular files: a read that can block forever (a pipe, a socket)
	// would stall the poller that runs fastcalls.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return 0, abi.ErrnoINVAL
	}
	f.fastMu.Lock()
	defer f.fastMu.Unlock()
	for i := range f.fast.e {
		e := &f.fast.e[i]
		if e.fd > 0 {
			continue
		}
		e.fd, e.op, e.off = fd, fc.Op, int64(fc.FileOff)
		e.buf = f.spec.Heap[fc.HeapOff : fc.HeapOff+fc.Length : fc.HeapOff+fc.Length]
		return abi.FastcallNumber(uint32(i), e.gen), 0
	}
	unix.Close(fd)
	return 0, abi.ErrnoMFILE
}

// runFastcall runs a curried call: one lookup, one system call.
func (f *Forwarder) runFastcall(num uint16) (int64, abi.Errno) {
	f.stats.fastcalls.Add(1)
	idx, gen := abi.SplitFastcall(num)
	// Held across the call: a revocation closes the fd only after it.
	f.fastMu.RLock()
	defer f.fastMu.RUnlock()
	e := &f.fast.e[idx]
	switch {
	case e.fd <= 0 && e.gen == 0:
		return -1, abi.ErrnoBADF
	case e.fd <= 0 || e.gen&abi.FastcallGenMask != gen:
		return -1, abi.ErrnoSTALE
	}
	var n int
	var err error
	switch e.op {
	case abi.SysPread64:
		n, err = unix.Pread(e.fd, e.buf, e.off)
	case abi.SysPwrite64:
		buf, errno := fitFileSize(e, f.spec.MaxFileSize)
		if errno != 0 {
			return -1, errno
		}
		n, err = unix.Pwrite(e.fd, buf, e.off)
	case abi.SysRead:
		n, err = unix.Read(e.fd, e.buf)
	case abi.SysWrite:
		buf, errno := fitFileSize(e, f.spec.MaxFileSize)
		if errno != 0 {
			return -1, errno
		}
		n, err = unix.Write(e.fd, buf)
	}
	if err != nil {
		return -1, abi.ErrnoOf(err)
	}
	return int64(n), 0
}

// fitFileSize is RLIMIT_FSIZE for a fastcall write, which sluiced runs
// outside the proxy's limits: what of e's buffer fits below limit (0: none)
// from where the write lands, EFBIG when nothing does (as the kernel, without
// SIGXFSZ). The landing position is e's offset, the fd's position for write,
// the file's end with O_APPEND (read each call: the proxy's fcntl could set
// it). For write and O_APPEND the position is read before the write: a
// concurrent write through the proxy on the same open file can move it
// meanwhile, so the file may pass limit by at most one fastcall's length.
func fitFileSize(e *fastEntry, limit uint64) ([]byte, abi.Errno) {
	if limit == 0 || len(e.buf) == 0 {
		return e.buf, 0
	}
	fl, err := unix.FcntlInt(uintptr(e.fd), unix.F_GETFL, 0)
	if err != nil {
		return nil, abi.ErrnoOf(err)
	}
	pos := e.off
	switch {
	case fl&unix.O_APPEND != 0:
		var st unix.Stat_t
		if err := unix.Fstat(e.fd, &st); err != nil {
			return nil, abi.ErrnoOf(err)
		}
		pos = st.Size
	case e.op == abi.SysWrite:
		if pos, err = unix.Seek(e.fd, 0, unix.SEEK_CUR); err != nil {
			return nil, abi.ErrnoOf(err)
		}
	}
	if pos < 0 || uint64(pos) >= limit {
		return nil, abi.Errno(unix.EFBIG)
	}
	return e.buf[:min(uint64(len(e.buf)), limit-uint64(pos))], 0
}

func (f *Forwarder) revokeFastcall(arg uint64) abi.Errno {
	if arg > 0xffff {
		return abi.ErrnoINVAL
	}
	idx, gen := abi.SplitFastcall(uint16(arg))
	f.fastMu.Lock()
	defer f.fastMu.Unlock()
	e := &f.fast.e[idx]
	if e.fd <= 0 || e.gen&abi.FastcallGenMask != gen {
		return abi.ErrnoSTALE
	}
	unix.Close(e.fd)
	*e = fastEntry{gen: e.gen + 1}
	return 0
}
