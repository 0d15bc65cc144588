package ivshmem

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Handover is a server's state for a successor process (sluiced re-executing
// itself): the descriptors it inherits and the guest peers on them. Export
// writes it, AdoptServer takes it over; the peers keep their ids and
// eventfds, so a guest sees nothing but a pause in the doorbells' service.
type Handover struct {
	Listener int            `json:"listener"` // the listening socket
	Shm      int            `json:"shm"`      // the server's dup of the memory
	Host     []int          `json:"host"`     // the host peer's eventfds, by vector
	NextID   uint16         `json:"next_id"`  // the next id to give out
	Peers    []HandoverPeer `json:"peers"`    // the peers that had joined
}

// HandoverPeer is one joined guest peer: its connection and its eventfds.
type HandoverPeer struct {
	ID   uint16 `json:"id"`
	Conn int    `json:"conn"`
	FDs  []int  `json:"fds"`
}

// ErrBadHandover is returned by AdoptServer for a hand-over that does not
// describe a server of the configuration (wrong vector count, duplicate
// ids or descriptors, a descriptor that is not what it should be).
var ErrBadHandover = errors.New("bad ivshmem hand-over")

// FDs lists every descriptor h names.
func (h Handover) FDs() []int {
	fds := append([]int{h.Listener, h.Shm}, h.Host...)
	for _, p := range h.Peers {
		fds = append(fds, p.Conn)
		fds = append(fds, p.FDs...)
	}
	return fds
}

// Export detaches the server from its descriptors for a hand-over and
// describes them: it stops its goroutines (no admission, disconnect or
// doorbell is handled any more: the successor does), closes what is its
// own (the epoll set, the peers that had not read their handshake yet,
// which connect again), hands its sockets on as duplicates and makes every
// descriptor it names inheritable across exec. The server is done with afterwards; Close must not follow
// (it would remove the socket the successor listens on), and the
// descriptors are the caller's to pass on or close.
func (s *Server) Export() (Handover, error) {
	s.mu.Lock()
	s.shutdown = true // Notify: ErrClosed
	s.mu.Unlock()
	s.ctl.Lock()
	if s.closed {
		s.ctl.Unlock()
		return Handover{}, ErrClosed
	}
	s.closed, s.exported = true, true // admit refuses, removeLocked and join leave the peers alone
	close(s.done)
	s.ctl.Unlock()
	// Wake every goroutine: the doorbell loop by its eventfd, the accept
	// loop and the peers' watchers by deadlines in the past.
	errs := []error{signal(s.wakefd), s.ln.SetDeadline(time.Now())}
	for _, p := range s.peers {
		errs = append(errs, p.conn.SetReadDeadline(time.Now()))
	}
	s.wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Handover{}, fmt.Errorf("stopping the ivshmem server for a hand-over: %w", err)
	}
	closeFDs([]int{s.epfd, s.wakefd})
	s.epfd, s.wakefd = -1, -1
	h := Handover{Shm: s.shm, Host: append([]int(nil), s.hostFDs...), NextID: s.nextID}
	// The sockets go as dups: the Go objects close their own descriptors
	// (the listener without removing the socket file).
	var err error
	if h.Listener, err = dupFD(s.ln); err != nil {
		return Handover{}, err
	}
	s.ln.SetUnlinkOnClose(false)
	s.ln.Close()
	for _, p := range s.sortedPeers() {
		if !p.joined || p.dead {
			p.close()
			continue
		}
		hp := HandoverPeer{ID: p.id, FDs: append([]int(nil), p.fds...)}
		if hp.Conn, err = dupFD(p.conn); err != nil {
			return Handover{}, err
		}
		p.conn.Close()
		h.Peers = append(h.Peers, hp)
	}
	for _, fd := range h.FDs() {
		if err := Inheritable(fd); err != nil {
			return Handover{}, err
		}
	}
	return h, nil
}

// Inheritable clears fd's close-on-exec flag.
func Inheritable(fd int) error {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		return fmt.Errorf("keeping fd %d across exec: %w", fd, err)
	}
	return nil
}

// Descriptors describes the server's descriptors as they are, without
// detaching anything (Export does): for a copy kept outside the process
// (systemd's fd store), from which AdoptServer can take the server over
// after a crash. The numbers are the server's, valid until it closes.
func (s *Server) Descriptors() (Handover, error) {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	if s.closed {
		return Handover{}, ErrClosed
	}
	h := Handover{Shm: s.shm, Host: append([]int(nil), s.hostFDs...), NextID: s.nextID}
	if err := rawControl(s.ln, func(fd int) { h.Listener = fd }); err != nil {
		return Handover{}, err
	}
	for _, p := range s.sortedPeers() {
		if !p.joined || p.dead {
			continue
		}
		hp := HandoverPeer{ID: p.id, FDs: append([]int(nil), p.fds...)}
		if err := rawControl(p.conn, func(fd int) { hp.Conn = fd }); err != nil {
			return Handover{}, err
		}
		h.Peers = append(h.Peers, hp)
	}
	return h, nil
}

// rawControl runs f on the descriptor under c (a listener or a
// connection).
func rawControl(c syscall.Conn, f func(int)) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("reaching a socket's fd: %w", err)
	}
	return rc.Control(func(fd uintptr) { f(int(fd)) })
}

// dupFD duplicates the descriptor under c (a listener or a connection).
func dupFD(c syscall.Conn) (int, error) {
	nfd := -1
	var err error
	cerr := rawControl(c, func(fd int) { nfd, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3) })
	if err = errors.Join(cerr, err); err != nil {
		return -1, fmt.Errorf("duplicating a socket's fd: %w", err)
	}
	return nfd, nil
}

// AdoptServer is NewServer for a successor process: it takes over the
// descriptors of h (a server that Export described, in the process that
// exec'd this one) instead of creating them, and the guest peers on them
// as joined peers. Every descriptor is checked to be what h says it is
// first: a hand-over that fails the check (ErrBadHandover) is left alone,
// closing nothing, since its numbers may name any descriptor of the
// process. Past the check the server owns them all, and an error closes
// them.
func AdoptServer(cfg ServerConfig, h Handover) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkHandover(cfg, h); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, uid: uint32(os.Geteuid()), shm: h.Shm, epfd: -1, wakefd: -1,
		done: make(chan struct{}), nextID: max(h.NextID, 1),
		peers:   make(map[uint16]*serverPeer),
		hostFDs: append([]int(nil), h.Host...),
	}
	s.initMutes()
	s.SetOwners(cfg.Owners)
	for _, fd := range s.hostFDs {
		unix.CloseOnExec(fd)
	}
	unix.CloseOnExec(s.shm)
	for _, p := range h.Peers {
		for _, fd := range p.FDs {
			unix.CloseOnExec(fd)
		}
		conn, cerr := adoptConn(p.Conn) // closes p.Conn
		if cerr != nil {
			// Not a connection after all: that peer is lost, the others
			// stay.
			closeFDs(p.FDs)
			continue
		}
		cred, _ := peerCred(conn) // zero where it cannot be read: only OnRefuse shows it
		s.peers[p.ID] = &serverPeer{id: p.ID, cred: cred, conn: conn, fds: append([]int(nil), p.FDs...),
			joined: true, gone: make(chan struct{})}
	}
	s.ln, err = adoptListener(h.Listener, cfg.SocketPath) // closes h.Listener
	if err == nil {
		err = s.adoptFDs()
	}
	if err != nil {
		s.abandon()
		return nil, err
	}
	s.wg.Add(2 + len(s.peers))
	for _, p := range s.peers {
		go s.watch(p)
	}
	go s.acceptLoop()
	go s.pollLoop()
	return s, nil
}

// adoptFDs creates what a server has of its own besides the adopted
// descriptors: the wake eventfd and the epoll set.
func (s *Server) adoptFDs() error {
	var err error
	if s.wakefd, err = newEventfd(); err != nil {
		return err
	}
	return s.setupEpoll()
}

// abandon undoes a failed adoption: the server's descriptors close, the
// listener without removing the socket file, and the peers' connections (a
// guest sees a disconnect: the successor could not keep it).
func (s *Server) abandon() {
	if s.ln != nil {
		s.ln.SetUnlinkOnClose(false)
		s.ln.Close()
	}
	for _, p := range s.peers {
		p.close()
	}
	s.closeFDs()
}

// checkHandover checks h's shape against cfg and every descriptor's kind.
func checkHandover(cfg ServerConfig, h Handover) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadHandover, fmt.Sprintf(format, a...))
	}
	if len(h.Host) != cfg.Vectors {
		return bad("%d host eventfds for %d vectors", len(h.Host), cfg.Vectors)
	}
	if len(h.Peers) > cfg.MaxPeers {
		return bad("%d peers, at most %d", len(h.Peers), cfg.MaxPeers)
	}
	ids := map[uint16]bool{}
	for _, p := range h.Peers {
		if p.ID == hostPeerID || ids[p.ID] {
			return bad("peer id %d is the host's or repeated", p.ID)
		}
		ids[p.ID] = true
		if len(p.FDs) != cfg.Vectors {
			return bad("peer %d has %d eventfds for %d vectors", p.ID, len(p.FDs), cfg.Vectors)
		}
	}
	seen := map[int]bool{}
	for _, fd := range h.FDs() {
		if fd < 3 || seen[fd] {
			return bad("fd %d is a standard stream or repeated", fd)
		}
		seen[fd] = true
	}
	for _, fd := range h.Host {
		if err := checkKind(fd, "anon_inode:[eventfd]"); err != nil {
			return err
		}
	}
	for _, p := range h.Peers {
		for _, fd := range p.FDs {
			if err := checkKind(fd, "anon_inode:[eventfd]"); err != nil {
				return err
			}
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(h.Shm, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return bad("shared-memory fd %d is not a file", h.Shm)
	}
	return nil
}

// checkKind checks that fd is open and names kind in /proc/self/fd.
func checkKind(fd int, kind string) error {
	got, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return fmt.Errorf("%w: fd %d: %w", ErrBadHandover, fd, err)
	}
	if got != kind {
		return fmt.Errorf("%w: fd %d is %s, want %s", ErrBadHandover, fd, got, kind)
	}
	return nil
}

// adoptListener makes a listener of fd, which must be a UNIX socket
// listening at path; fd is closed (the listener has a dup).
func adoptListener(fd int, path string) (*net.UnixListener, error) {
	ln, err := fromFD(fd, "ivshmem-listener", net.FileListener)
	if err != nil {
		return nil, fmt.Errorf("%w: listener fd %d: %w", ErrBadHandover, fd, err)
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok || ul.Addr().String() != path {
		ln.Close()
		return nil, fmt.Errorf("%w: listener fd %d is on %s, want %s", ErrBadHandover, fd, ln.Addr(), path)
	}
	ul.SetUnlinkOnClose(true) // as a listener of its own would
	return ul, nil
}

// adoptConn makes a connection of fd, which must be a connected UNIX
// socket; fd is closed (the connection has a dup).
func adoptConn(fd int) (*net.UnixConn, error) {
	c, err := fromFD(fd, "ivshmem-peer", net.FileConn)
	if err != nil {
		return nil, fmt.Errorf("%w: connection fd %d: %w", ErrBadHandover, fd, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("%w: connection fd %d is no UNIX socket", ErrBadHandover, fd)
	}
	return uc, nil
}

// fromFD makes a socket object of fd with mk (net.FileListener or
// net.FileConn, which take a dup) and closes fd.
func fromFD[T any](fd int, name string, mk func(*os.File) (T, error)) (T, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return mk(f)
}
