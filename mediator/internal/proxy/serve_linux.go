package proxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/internal/spin"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// ServeConfig configures Serve.
type ServeConfig struct {
	// Dir is the default context's working directory, and the directory a
	// registered context's relative cwd starts from. Default "/" (in the
	// sandbox: the VM's volume). Tests without a sandbox set a temp dir.
	Dir string
	// Spin is how long the receive loop keeps watching the request ring
	// after its last request before it announces that it sleeps and blocks
	// on the socket (0: at once; the mediator then kicks every batch).
	Spin time.Duration
	// ContextSpin is how long an idle context thread watches its queue
	// before it blocks (0: at once). At most GOMAXPROCS-2 threads spin at a
	// time, so that spinning never takes the last processors.
	ContextSpin time.Duration
}

// Default spins of sluice-proxy.
const (
	DefaultSpin        = 200 * time.Microsecond
	DefaultContextSpin = 50 * time.Microsecond
)

// DefaultServeConfig returns the configuration sluice-proxy serves with:
// the spins on a host of 4 processors or more (GOMAXPROCS), none below, where
// a spinning proxy takes a core from the callers and the forwarder and costs
// more than the wakeups it saves.
func DefaultServeConfig() ServeConfig {
	cfg := ServeConfig{Dir: "/"}
	if runtime.GOMAXPROCS(0) >= 4 {
		cfg.Spin, cfg.ContextSpin = DefaultSpin, DefaultContextSpin
	}
	return cfg
}

// Validate checks cfg.
func (cfg ServeConfig) Validate() error {
	switch {
	case cfg.Dir == "":
		return fmt.Errorf("serve config: empty Dir")
	case cfg.Spin < 0 || cfg.Spin > time.Second || cfg.ContextSpin < 0 || cfg.ContextSpin > time.Second:
		return fmt.Errorf("serve config: spins %v, %v: want 0..1s", cfg.Spin, cfg.ContextSpin)
	}
	return nil
}

// answered is the errno a handler returns when it answered the request
// itself (MsgFastcall instead of a Result). It is no Linux errno.
const answered abi.Errno = 1 << 31

// Serve serves the mediator on conn (SOCK_SEQPACKET) for a VM whose heap is
// heap: it sends Ready, maps the rings of the MsgRing that follows
// (proxyproto's version 3), and the VM's syscall area when it comes with
// them, and answers every request published there, in its slot and through
// the result ring, until the mediator closes its end (nil), ctx
// ends (ctx.Err()) or the connection fails. Calls messages on the socket
// are served too, with Results datagrams (the serving tests' transport).
// The default context (0) runs as the process's own identity, in cfg.Dir,
// with umask 022.
func Serve(ctx context.Context, conn *net.UnixConn, heap []byte, cfg ServeConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s := &server{conn: conn, heap: heap, dir: cfg.Dir, cfg: cfg}
	s.out = &sink{w: newWriter(conn)}
	if err := s.init(); err != nil {
		return err
	}
	werr := make(chan error, 1)
	go func() { werr <- s.out.w.run() }()
	defer func() {
		close(s.out.w.stop)
		for _, c := range s.contexts {
			if c != nil {
				close(c.in)
			}
		}
		<-werr
	}()
	if _, err := conn.Write(proxyproto.AppendReady(nil, os.Getpid())); err != nil {
		return fmt.Errorf("sending ready: %w", err)
	}
	buf := make([]byte, proxyproto.MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(8)) // MsgRing: the rings and the area
	var (
		reqs  []proxyproto.Request
		ring  *proxyproto.Ring
		head  uint64
		last  time.Time
		idle  uint // empty looks at the ring since the last request
		yield = spin.New()
	)
	for {
		if ring != nil {
			var err error
			next := head
			if reqs, next, err = ring.ProxyRequests(reqs[:0], head); err != nil {
				return fmt.Errorf("receiving calls: %w", err)
			}
			if next != head {
				// Answer first: handing the records back and reading
				// the clock can wait until the results are out.
				s.dispatch(reqs)
				head = next
				ring.ProxyConsumed(head) // copied out: the records are free
				last, idle = time.Now(), 0
				continue
			}
			// Spinning: the clock is read every 32 empty looks only;
			// yields as package spin says.
			if idle++; idle%32 != 0 || time.Since(last) < cfg.Spin {
				yield.Idle()
				continue
			}
			// Announce the sleep, then look once more: a batch published
			// before the announcement was seen is never left behind.
			ring.ProxyIdle(true)
			if ring.ProxyPending(head) {
				ring.ProxyIdle(false)
				continue
			}
		}
		n, oobn, err := s.recv(ctx, buf, oob)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return fmt.Errorf("receiving calls: %w", err)
		case n == 0:
			return nil
		}
		msg := buf[:n]
		switch proxyproto.Type(msg) {
		case proxyproto.MsgKick:
			if ring != nil {
				ring.ProxyIdle(false)
			}
			last = time.Now()
		case proxyproto.MsgRing:
			if ring != nil {
				closeRights(oob[:oobn])
				return fmt.Errorf("receiving calls: %w: a second ring", proxyproto.ErrMessage)
			}
			var area *shm.Region
			if ring, area, err = mapRing(msg, oob[:oobn]); err != nil {
				return fmt.Errorf("receiving the rings: %w", err)
			}
			s.out.ring.Store(&ringOut{rg: ring, area: area, fd: s.connFD, stop: s.out.w.stop})
			ring.ProxyIdle(false)
			last = time.Now()
		default:
			closeRights(oob[:oobn])
			if reqs, err = proxyproto.DecodeCalls(reqs[:0], msg); err != nil {
				return fmt.Errorf("receiving calls: %w", err)
			}
			s.dispatch(reqs)
		}
		select {
		case err := <-werr:
			werr <- err
			return fmt.Errorf("sending results: %w", err)
		default:
		}
	}
}

// recv reads one datagram, blocking this thread in poll rather than Go's
// network poller (which runs late while other goroutines spin); it looks at
// ctx every 100 ms.
func (s *server) recv(ctx context.Context, buf, oob []byte) (n, oobn int, err error) {
	for {
		n, oobn, _, _, err = unix.Recvmsg(s.connFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EAGAIN && err != unix.EINTR {
			if err == nil {
				raceAcquireIO()
			}
			if err == nil && n > proxyproto.MaxMessage {
				err = fmt.Errorf("%w: datagram of more than %d bytes", proxyproto.ErrMessage, proxyproto.MaxMessage)
			}
			return n, oobn, err
		}
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		pfd := []unix.PollFd{{Fd: int32(s.connFD), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, 100); err != nil && err != unix.EINTR {
			return 0, 0, err
		}
	}
}

// mapRing maps the ring memfd a MsgRing carries (shared, read/write), and
// the syscall area's when it carries one, and closes the descriptors. The
// mappings live as long as the process: context threads may still be
// answering when Serve returns.
func mapRing(msg, oob []byte) (*proxyproto.Ring, *shm.Region, error) {
	fds := rights(oob)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	l, size, a, err := proxyproto.DecodeRing(msg)
	if err != nil {
		return nil, nil, err
	}
	if want := 1 + min(int(a.Slots), 1); len(fds) != want {
		return nil, nil, fmt.Errorf("%w: ring with %d descriptors, want %d", proxyproto.ErrMessage, len(fds), want)
	}
	mem, err := unix.Mmap(fds[0], 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mapping the rings: %w", err)
	}
	rg, err := proxyproto.OpenRing(mem, l)
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, nil, err
	}
	if a.Slots == 0 {
		return rg, nil, nil
	}
	area, err := mapArea(fds[1], a)
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, nil, err
	}
	return rg, area, nil
}

// mapArea maps the syscall area of a's slots at a.Off in fd.
func mapArea(fd int, a proxyproto.AreaSpec) (*shm.Region, error) {
	page := uint64(unix.Getpagesize())
	base := a.Off &^ (page - 1)
	size := abi.SyscallAreaSize(int(a.Slots))
	m, err := unix.Mmap(fd, int64(base), int(a.Off-base+size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the syscall area (%d slots at %d): %w", a.Slots, a.Off, err)
	}
	return shm.New(m[a.Off-base:]), nil
}

func rights(oob []byte) []int {
	cms, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range cms {
		if f, err := unix.ParseUnixRights(&cms[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// closeRights closes descriptors that came with a message that wants none.
func closeRights(oob []byte) {
	for _, fd := range rights(oob) {
		unix.Close(fd)
	}
}

// server is Serve's state; the receive loop alone touches it.
type server struct {
	conn     *net.UnixConn
	connFD   int
	heap     []byte
	dir      string
	cfg      ServeConfig
	out      *sink
	local    []proxyproto.Result
	contexts [abi.MaxContexts + 1]*guestContext
	pending  [abi.MaxContexts + 1][]proxyproto.Request
	touched  []uint8
}

func (s *server) init() error {
	raw, err := s.conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	if err := raw.Control(func(fd uintptr) { s.connFD = int(fd) }); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	c, e := startContext(0, identity{keep: true, umask: 0o022, base: s.dir}, s.heap, s.out, s.connFD, s.cfg.ContextSpin)
	if e != 0 {
		return fmt.Errorf("starting the default context: %w", e)
	}
	s.contexts[0] = c
	return nil
}

// dispatch serves one batch: each context's requests go to its thread in one
// hand-off; null, the context table's own calls and every early failure are
// answered here, together, in one slice.
func (s *server) dispatch(reqs []proxyproto.Request) {
	local := s.local[:0]
	for i := range reqs {
		r := &reqs[i]
		if r.Flags&abi.SysFlagFastcall != 0 {
			// Fastcalls are the mediator's: it runs them itself.
			local = append(local, result(r, 0, abi.ErrnoINVAL))
			continue
		}
		h := lookup(r.Number)
		if h.where == inLoop && r.Number == abi.SysNull {
			local = append(local, result(r, 0, 0))
			continue
		}
		c := s.contexts[r.Context]
		switch {
		case h.where == nowhere:
			local = append(local, result(r, 0, abi.ErrnoNOSYS))
		case h.where == inMediator:
			local = append(local, result(r, 0, abi.ErrnoINVAL))
		case c == nil:
			local = append(local, result(r, 0, abi.ErrnoSRCH))
		case h.where == inLoop:
			// Calls handed off before keep their order before the table
			// changes.
			s.flush()
			ret, e := s.contextCall(r)
			local = append(local, result(r, ret, e))
		default:
			if len(s.pending[r.Context]) == 0 {
				s.touched = append(s.touched, r.Context)
			}
			s.pending[r.Context] = append(s.pending[r.Context], *r)
		}
	}
	s.flush()
	if len(local) > 0 {
		s.out.sendLocal(local)
	}
	s.local = local
}

// flush hands each context its pending group.
func (s *server) flush() {
	for _, id := range s.touched {
		group := s.pending[id]
		s.pending[id] = make([]proxyproto.Request, 0, cap(group))
		s.contexts[id].in <- group
	}
	s.touched = s.touched[:0]
}

func (s *server) contextCall(r *proxyproto.Request) (int64, abi.Errno) {
	if r.Number == abi.SysContextRegister {
		return s.register(r)
	}
	return s.unregister(r.Args[0])
}

// register starts a context: uid, gid, umask, cwd path (relative paths start
// from ServeConfig.Dir). It answers the new id, 1..255; EAGAIN when all are
// taken; EINVAL for a uid or gid of -1 or a umask past 0777; the errno of
// setresgid, setresuid or chdir that failed.
func (s *server) register(r *proxyproto.Request) (int64, abi.Errno) {
	uid, gid, umask := r.Args[0], r.Args[1], r.Args[2]
	if uid >= 1<<32-1 || gid >= 1<<32-1 || umask&^0o777 != 0 {
		return 0, abi.ErrnoINVAL
	}
	cwd, e := heapPath(s.heap, r.Args[3])
	if e != 0 {
		return 0, e
	}
	if cwd == "" {
		return 0, abi.ErrnoNOENT
	}
	id := 0
	for i := 1; i <= abi.MaxContexts; i++ {
		if s.contexts[i] == nil {
			id = i
			break
		}
	}
	if id == 0 {
		return 0, abi.ErrnoAGAIN
	}
	ident := identity{uid: uint32(uid), gid: uint32(gid), umask: uint32(umask), base: s.dir, cwd: cwd}
	c, e := startContext(uint8(id), ident, s.heap, s.out, s.connFD, s.cfg.ContextSpin)
	if e != 0 {
		return 0, e
	}
	s.contexts[id] = c
	return int64(id), 0
}

// unregister ends context id: its thread serves what it was handed, then
// exits, and its descriptors close with its fd table. The default context
// stays (EINVAL); an id not registered is ESRCH.
func (s *server) unregister(id uint64) (int64, abi.Errno) {
	switch {
	case id == 0:
		return 0, abi.ErrnoINVAL
	case id > abi.MaxContexts || s.contexts[id] == nil:
		return 0, abi.ErrnoSRCH
	}
	close(s.contexts[id].in)
	s.contexts[id] = nil
	return 0, 0
}

// result makes the Result of r: ret on success, -1 and e on failure.
func result(r *proxyproto.Request, ret int64, e abi.Errno) proxyproto.Result {
	if e != 0 {
		ret = -1
	}
	return proxyproto.Result{Slot: r.Slot, Seq: r.Seq, Ret: ret, Errno: e, Flags: r.Flags, Call: proxyproto.CallWord(r), Pos: r.Pos}
}
