package ivshmem

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/internal/sockfile"
	"golang.org/x/sys/unix"
)

// Defaults for ServerConfig.
const (
	DefaultSocketMode os.FileMode = 0o660
	DefaultMaxPeers   int         = 16
	// DefaultHandshakeTimeout is how long a new peer has to read its
	// handshake; QEMU and Client read it at once.
	DefaultHandshakeTimeout = 2 * time.Second
)

// writeTimeout bounds every batch of messages sent to one peer: a peer that
// stops reading is dropped instead of stalling the server. A variable so
// tests can shorten it.
var writeTimeout = 2 * time.Second

// ServerConfig configures a Server.
type ServerConfig struct {
	// SocketPath is where the server listens. A stale socket file (nothing
	// listening) is replaced; a live one is an error (ErrSocketInUse); any
	// other file is left alone and is an error.
	SocketPath string
	// SocketMode is the socket file's mode, default 0o660 so that
	// libvirt's qemu user (by group) can connect.
	SocketMode os.FileMode
	// ShmFD is the shared memory (a memfd whose size is a power of two, as
	// QEMU requires). The server dups it; the caller keeps its own fd.
	ShmFD int
	// Vectors is the number of eventfds per peer, 1..256; it must match
	// the guests' ivshmem-doorbell "vectors" property.
	Vectors int
	// MaxPeers caps the guest peers connected at once, default 16. A
	// connection that finds every slot taken takes the slot of the oldest
	// peer that has not read its handshake yet (that peer is dropped), and
	// is closed at once when all of them have read it: a peer that never
	// reads keeps no one out.
	MaxPeers int
	// Owners are the users who may connect besides root and the server's
	// own uid (either could read the memory through /proc anyway). Every
	// other connection is closed, counted by OnRefuse with ErrForeignPeer,
	// before it receives the memory or any eventfd. Default none.
	Owners []Owner
	// HandshakeTimeout is how long a new peer has to read its whole
	// handshake (version, id, memory, eventfds); one that has not by then
	// is dropped and its slot freed. Default 2s.
	HandshakeTimeout time.Duration
	// OnRefuse, optional, is called for each connection closed before it
	// joined, with its credentials (zero where they could not be read) and
	// why: an error wrapping ErrForeignPeer, ErrPeersFull or
	// ErrNoHandshake, or another failure. It must not block long nor call
	// Close.
	OnRefuse func(peer Cred, why error)
	// OnDoorbell is called from the server's epoll goroutine when a guest
	// signals the host peer's eventfd for vector; count is the eventfd
	// counter read, i.e. how many signals were coalesced. It must not
	// block: it delays every later doorbell.
	OnDoorbell func(vector int, count uint64)
	// OnPeer, optional, is called when a guest peer joins (it has read its
	// whole handshake) or a peer that joined disconnects. Calls are
	// serialized in event order and block admissions and disconnects while
	// they run; OnPeer must not call Close.
	OnPeer func(id uint16, connected bool)
	// OnJoinFDs, optional, is called with OnPeer's join, with the new
	// peer's connection and eventfds (valid for the call only: to keep
	// them past a restart of the process, in systemd's fd store).
	OnJoinFDs func(id uint16, conn int, fds []int)
	// OnAdmit, optional, is called for each new guest peer before its
	// handshake is sent (so before it can map the memory): the host may
	// rewrite what a guest reads first there. Calls are serialized with
	// admissions; OnAdmit must not call Close.
	OnAdmit func()
	// DoorbellLimit, optional, is the most doorbells a second the server
	// reads from its guests, over all vectors; a vector rung faster is
	// muted for MuteFor at a time (limit.go). 0: no limit.
	DoorbellLimit int
	// OnLimit, optional, is called from the epoll goroutine when vector is
	// muted for ringing over DoorbellLimit. It must not block.
	OnLimit func(vector int)
	// OnIdle, optional, is called from the epoll goroutine after each pass
	// over the ready doorbells; true makes the next wait a poll that does
	// not block (the caller busy-polls its rings meanwhile), false blocks
	// until a doorbell. It must not block.
	OnIdle func() (again bool)
}

func (c ServerConfig) withDefaults() (ServerConfig, error) {
	if c.SocketMode == 0 {
		c.SocketMode = DefaultSocketMode
	}
	if c.MaxPeers == 0 {
		c.MaxPeers = DefaultMaxPeers
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	switch {
	case c.SocketPath == "":
		return c, errors.New("invalid ivshmem server config: empty socket path")
	case c.SocketMode&^fs.ModePerm != 0:
		return c, fmt.Errorf("invalid ivshmem server config: socket mode %v has bits beyond permissions", c.SocketMode)
	case c.ShmFD < 0:
		return c, fmt.Errorf("invalid ivshmem server config: shared-memory fd %d", c.ShmFD)
	case c.Vectors < 1 || c.Vectors > MaxVectors:
		return c, fmt.Errorf("invalid ivshmem server config: %d vectors, want 1..%d", c.Vectors, MaxVectors)
	case c.MaxPeers < 1 || c.MaxPeers > MaxPeerID:
		return c, fmt.Errorf("invalid ivshmem server config: max peers %d, want 1..%d", c.MaxPeers, MaxPeerID)
	case c.HandshakeTimeout < 0:
		return c, fmt.Errorf("invalid ivshmem server config: negative handshake timeout %v", c.HandshakeTimeout)
	case c.OnDoorbell == nil:
		return c, errors.New("invalid ivshmem server config: OnDoorbell is nil")
	case c.DoorbellLimit < 0:
		return c, fmt.Errorf("invalid ivshmem server config: doorbell limit %d", c.DoorbellLimit)
	}
	return c, nil
}

// hostPeerID is the mediator's own id on the bus.
const hostPeerID = 0

// Server is an ivshmem server that is also peer 0, the host peer.
type Server struct {
	cfg     ServerConfig
	uid     uint32                  // the server's own, always admitted
	owners  atomic.Pointer[[]Owner] // admitted besides (cfg.Owners, SetOwners)
	ln      *net.UnixListener
	shm     int   // the server's dup of cfg.ShmFD
	hostFDs []int // the host peer's eventfds, one per vector
	epfd    int
	wakefd  int // signalled by Close to stop the epoll goroutine
	done    chan struct{}
	wg      sync.WaitGroup

	// ctl serializes admissions and disconnects and the messages that
	// announce them, so every peer sees one consistent order.
	ctl    sync.Mutex
	closed bool // under ctl
	// exported: Export handed the descriptors on (under ctl); nothing
	// closes them any more.
	exported bool
	nextID   uint16 // under ctl
	nextSeq  uint64 // under ctl: admission order, for choosing whom to evict

	// mu guards peers for the fast paths (Notify, Peers); peers changes
	// only with both ctl and mu held, so ctl holders may read it freely.
	mu       sync.RWMutex
	peers    map[uint16]*serverPeer
	shutdown bool // under mu

	closeOnce sync.Once
	closeErr  error

	mute    mutes         // the epoll goroutine's
	limited atomic.Uint64 // Limited
}

type serverPeer struct {
	id   uint16
	cred Cred
	seq  uint64
	conn *net.UnixConn
	fds  []int
	dead bool // under ctl: a send failed, its watcher will remove it
	// joined: it has read its handshake (under ctl and mu). Until then it
	// holds its slot only until the handshake deadline or a newcomer.
	joined bool
	gone   chan struct{} // closed when its connection ended
}

// NewServer validates cfg, listens at cfg.SocketPath at once and starts
// the accept and doorbell goroutines.
func NewServer(cfg ServerConfig) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, uid: uint32(os.Geteuid()), shm: -1, epfd: -1, wakefd: -1,
		done: make(chan struct{}), nextID: 1,
		peers: make(map[uint16]*serverPeer),
	}
	s.initMutes()
	s.SetOwners(cfg.Owners)
	if err := s.openFDs(); err != nil {
		s.closeFDs()
		return nil, err
	}
	if s.ln, err = listen(cfg.SocketPath, cfg.SocketMode); err != nil {
		s.closeFDs()
		return nil, err
	}
	s.wg.Add(2)
	go s.acceptLoop()
	go s.pollLoop()
	return s, nil
}

func (s *Server) openFDs() error {
	fd, err := unix.FcntlInt(uintptr(s.cfg.ShmFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("duplicating shared-memory fd %d: %w", s.cfg.ShmFD, err)
	}
	s.shm = fd
	if s.hostFDs, err = newEventfds(s.cfg.Vectors); err != nil {
		return fmt.Errorf("creating host peer eventfds: %w", err)
	}
	if s.wakefd, err = newEventfd(); err != nil {
		return err
	}
	return s.setupEpoll()
}

func (s *Server) closeFDs() {
	closeFDs(s.hostFDs)
	closeFDs([]int{s.shm, s.epfd, s.wakefd})
}

// listen replaces a stale socket at path, listens and sets the mode.
func listen(path string, mode os.FileMode) (*net.UnixListener, error) {
	if err := sockfile.RemoveStale(path, time.Second); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("setting mode of %s: %w", path, err)
	}
	return ln, nil
}

// HostPeerID is the mediator's own peer id, 0.
func (s *Server) HostPeerID() uint16 { return hostPeerID }

// Peers returns the ids of the guest peers that joined (read their
// handshake) and are connected, sorted.
func (s *Server) Peers() []uint16 {
	s.mu.RLock()
	ids := make([]uint16, 0, len(s.peers))
	for id, p := range s.peers {
		if p.joined {
			ids = append(ids, id)
		}
	}
	s.mu.RUnlock()
	slices.Sort(ids)
	return ids
}

// Notify interrupts a guest peer's vector by signalling its eventfd.
func (s *Server) Notify(peer uint16, vector int) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.shutdown {
		return ErrClosed
	}
	p, ok := s.peers[peer]
	if !ok {
		return fmt.Errorf("notifying peer %d: %w", peer, ErrNoPeer)
	}
	if vector < 0 || vector >= len(p.fds) {
		return fmt.Errorf("notifying peer %d vector %d: %w", peer, vector, ErrBadVector)
	}
	// The read lock keeps the fd from being closed (and its number
	// reused) under the write.
	return signal(p.fds[vector])
}

// Close stops the server: it stops listening (removing the socket file),
// disconnects every peer, waits for its goroutines and closes every fd it
// holds. It is idempotent, and does nothing after Export.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.shutdown = true
		s.mu.Unlock()
		s.ctl.Lock()
		if s.exported { // the descriptors went to a successor
			s.ctl.Unlock()
			return
		}
		s.closed = true
		close(s.done)
		if err := s.ln.Close(); err != nil {
			s.closeErr = fmt.Errorf("closing ivshmem listener: %w", err)
		}
		for _, p := range s.peers {
			p.conn.Close() // its watcher removes it
		}
		s.ctl.Unlock()
		if err := signal(s.wakefd); err != nil && s.closeErr == nil {
			s.closeErr = fmt.Errorf("waking doorbell loop: %w", err)
		}
		s.wg.Wait()
		s.closeFDs()
	})
	return s.closeErr
}
