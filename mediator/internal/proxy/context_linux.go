package proxy

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// guestContext is one guest context: a goroutine locked for good to an OS
// thread that has its own fd table, working directory, umask and
// credentials. Its requests arrive as whole groups on in; its results go to
// the writer.
type guestContext struct {
	id   uint8
	heap []byte
	in   chan []proxyproto.Request
	out  *sink
	spin time.Duration // how long an idle thread watches in before blocking

	// connFD is this thread's copy of the mediator socket (inherited when
	// the thread unshared its fd table): MsgFastcall and its descriptor go
	// out on it. It is reserved like every inherited descriptor.
	connFD int
	// reserved marks the descriptors the thread's table inherited (the Go
	// runtime's, the mediator socket, stdio): not the guest's, EBADF.
	reserved []bool
}

// identity is what a context runs as.
type identity struct {
	keep     bool   // keep the process's credentials (the default context)
	uid, gid uint32 // inside the sandbox's user namespace
	umask    uint32
	base     string // the directory a relative cwd starts from
	cwd      string // "" for base itself
}

// contextQueue bounds the groups waiting for one context: the receive loop
// blocks (backpressure to the mediator) rather than queueing without end.
const contextQueue = 64

// startContext starts a context's thread and returns once the thread is set
// up, or the errno that stopped it (an invalid cwd, an unmapped uid).
func startContext(id uint8, ident identity, heap []byte, out *sink, connFD int, spin time.Duration) (*guestContext, abi.Errno) {
	c := &guestContext{id: id, heap: heap, in: make(chan []proxyproto.Request, contextQueue), out: out, connFD: connFD, spin: spin}
	ready := make(chan abi.Errno)
	go c.thread(ident, ready)
	if e := <-ready; e != 0 {
		return nil, e
	}
	return c, 0
}

func (c *guestContext) thread(ident identity, ready chan<- abi.Errno) {
	// Never unlocked: the thread's fd table, cwd and credentials are the
	// context's alone, and the runtime ends the thread with the goroutine.
	runtime.LockOSThread()
	if e := c.setup(ident); e != 0 {
		ready <- e
		return
	}
	ready <- 0
	c.serve()
}

// setup gives the locked thread its own fs state and fd table, then the
// context's identity. Credentials change with raw per-thread system calls:
// syscall.Setresuid would change every thread of the process (and stop them
// all to do it).
func (c *guestContext) setup(id identity) abi.Errno {
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_FILES); err != nil {
		return abi.ErrnoOf(err)
	}
	c.reserved = inheritedFDs()
	c.closeInheritedStreams()
	if err := unix.Chdir(id.base); err != nil {
		return abi.ErrnoOf(err)
	}
	if !id.keep {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(id.gid), uintptr(id.gid), uintptr(id.gid)); e != 0 {
			return abi.Errno(e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(id.uid), uintptr(id.uid), uintptr(id.uid)); e != 0 {
			return abi.Errno(e)
		}
	}
	if id.cwd != "" {
		if err := unix.Chdir(id.cwd); err != nil {
			return abi.ErrnoOf(err)
		}
	}
	unix.Umask(int(id.umask))
	return 0
}

// inheritedFDs returns which descriptors the thread's new table holds, found
// with poll (POLLNVAL marks a closed one), up to RLIMIT_NOFILE.
func inheritedFDs() []bool {
	var lim unix.Rlimit
	n := 1 << 16
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur < uint64(n) {
		n = int(lim.Cur)
	}
	set := make([]bool, n)
	high := -1
	chunk := min(256, n)
	pfds := make([]unix.PollFd, chunk)
	for base := 0; base < n; base += chunk {
		k := min(chunk, n-base)
		for i := range pfds[:k] {
			pfds[i] = unix.PollFd{Fd: int32(base + i)}
		}
		if _, err := unix.Poll(pfds[:k], 0); err != nil {
			continue
		}
		for i := range pfds[:k] {
			if pfds[i].Revents&unix.POLLNVAL == 0 {
				set[base+i] = true
				high = base + i
			}
		}
	}
	return set[:high+1]
}

// fd decodes a descriptor argument: the low 32 bits, as the kernel reads an
// int. A descriptor the guest did not open is EBADF.
func (c *guestContext) fd(a uint64) (int, abi.Errno) {
	fd := int(int32(a))
	if fd >= 0 && fd < len(c.reserved) && c.reserved[fd] {
		return -1, abi.ErrnoBADF
	}
	return fd, 0
}

// dirfd decodes a directory descriptor argument (AT_FDCWD allowed).
func (c *guestContext) dirfd(a uint64) (int, abi.Errno) {
	if int(int32(a)) == unix.AT_FDCWD {
		return unix.AT_FDCWD, 0
	}
	return c.fd(a)
}

// serve runs the context's groups one call after the other; results go
// straight to the sink (the result ring) from this thread.
func (c *guestContext) serve() {
	var res []proxyproto.Result
	for {
		group, ok := c.next()
		if !ok {
			return
		}
		res = res[:0]
		for i := range group {
			r := &group[i]
			h := lookup(r.Number)
			if h.mayBlock && len(res) > 0 {
				c.out.send(res)
				res = res[:0]
			}
			ret, e := h.fn(c, r)
			if e == answered {
				continue
			}
			res = append(res, result(r, ret, e))
		}
		if len(res) > 0 {
			c.out.send(res)
		}
	}
}

// spinners counts the context threads watching their queues.
var spinners atomic.Int32

// next returns the next group, false once in is closed. An idle thread
// watches in for c.spin before it blocks, while fewer than GOMAXPROCS-2
// threads spin: a group handed to a watching thread costs no wakeup (a
// blocked locked thread is a futex wake, ~10 µs).
func (c *guestContext) next() ([]proxyproto.Request, bool) {
	select {
	case g, ok := <-c.in:
		return g, ok
	default:
	}
	if c.spin > 0 {
		if int(spinners.Add(1)) <= runtime.GOMAXPROCS(0)-2 {
			deadline := time.Now().Add(c.spin)
			for i := 0; len(c.in) == 0; i++ {
				if i&63 == 0 && time.Now().After(deadline) {
					break
				}
			}
		}
		spinners.Add(-1)
	}
	g, ok := <-c.in
	return g, ok
}

// closeInheritedStreams closes the thread's copies of inherited sockets and
// pipes, but the mediator socket's: a copy would keep the peer's end open
// (a process that serves in-process would never see the mediator's EOF).
// Their numbers are free for the guest. Nothing else is closed: the runtime's
// epoll and eventfd descriptors must stay valid in every thread's table.
func (c *guestContext) closeInheritedStreams() {
	for fd, ok := range c.reserved {
		if !ok || fd <= 2 || fd == c.connFD {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			continue
		}
		if t := st.Mode & unix.S_IFMT; t == unix.S_IFSOCK || t == unix.S_IFIFO {
			unix.Close(fd)
			c.reserved[fd] = false
		}
	}
}
