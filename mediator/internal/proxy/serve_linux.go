package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// ServeConfig configures Serve.
type ServeConfig struct {
	// Dir is the default context's working directory, and the directory a
	// registered context's relative cwd starts from. Default "/" (in the
	// sandbox: the VM's volume). Tests without a sandbox set a temp dir.
	Dir string
}

// DefaultServeConfig returns the configuration sluice-proxy serves with.
func DefaultServeConfig() ServeConfig { return ServeConfig{Dir: "/"} }

// Validate checks cfg.
func (cfg ServeConfig) Validate() error {
	if cfg.Dir == "" {
		return fmt.Errorf("serve config: empty Dir")
	}
	return nil
}

// answered is the errno a handler returns when it answered the request
// itself (MsgFastcall instead of a Result). It is no Linux errno.
const answered abi.Errno = 1 << 31

// Serve serves the mediator on conn (SOCK_SEQPACKET) for a VM whose heap is
// heap: it sends Ready, then answers every request of every Calls message,
// until the mediator closes its end (nil), ctx ends (ctx.Err()) or the
// connection fails. The default context (0) runs as the process's own
// identity, in cfg.Dir, with umask 022.
func Serve(ctx context.Context, conn *net.UnixConn, heap []byte, cfg ServeConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s := &server{conn: conn, heap: heap, dir: cfg.Dir, out: newWriter(conn)}
	if err := s.init(); err != nil {
		return err
	}
	werr := make(chan error, 1)
	go func() { werr <- s.out.run() }()
	defer func() {
		close(s.out.stop)
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
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, proxyproto.MaxMessage+1)
	var reqs []proxyproto.Request
	for {
		n, err := conn.Read(buf)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, io.EOF) || err == nil && n == 0:
			return nil
		case err != nil:
			return fmt.Errorf("receiving calls: %w", err)
		}
		if reqs, err = proxyproto.DecodeCalls(reqs[:0], buf[:n]); err != nil {
			return fmt.Errorf("receiving calls: %w", err)
		}
		s.dispatch(reqs)
		select {
		case err := <-werr:
			werr <- err
			return fmt.Errorf("sending results: %w", err)
		default:
		}
	}
}

// server is Serve's state; the receive loop alone touches it.
type server struct {
	conn     *net.UnixConn
	connFD   int
	heap     []byte
	dir      string
	out      *writer
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
	c, e := startContext(0, identity{keep: true, umask: 0o022, base: s.dir}, s.heap, s.out, s.connFD)
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
	local := s.out.get()
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
		s.out.send(local)
	}
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
	c, e := startContext(uint8(id), ident, s.heap, s.out, s.connFD)
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
	return proxyproto.Result{Slot: r.Slot, Seq: r.Seq, Ret: ret, Errno: e}
}
