package ivshmem

import (
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// How often awaitHandshake looks whether a new peer has read its handshake:
// first at once, then at intervals doubling from the first to the last.
const (
	handshakePollFirst = 50 * time.Microsecond
	handshakePollMax   = 10 * time.Millisecond
)

// awaitHandshake lets p join once it has read everything sent to it (its
// handshake, and announcements since), and drops it when it has not by the
// deadline: a connection that never reads holds its slot no longer.
func (s *Server) awaitHandshake(p *serverPeer, deadline time.Time) {
	defer s.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	wait := handshakePollFirst
	for {
		select {
		case <-s.done:
			return
		case <-p.gone:
			return
		case <-t.C:
		}
		n, err := unread(p.conn)
		switch {
		case err == nil && n == 0:
			s.join(p)
			return
		case err != nil:
			s.dropPending(p, fmt.Errorf("peer %d: %w: %w", p.id, ErrNoHandshake, err))
			return
		case !time.Now().Before(deadline):
			s.dropPending(p, fmt.Errorf("peer %d: %w within %v", p.id, ErrNoHandshake, s.cfg.HandshakeTimeout))
			return
		}
		t.Reset(min(wait, time.Until(deadline)))
		wait = min(2*wait, handshakePollMax)
	}
}

// join makes p a peer that counts (Peers, OnPeer), unless it is gone.
func (s *Server) join(p *serverPeer) {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	if s.closed || p.dead || s.peers[p.id] != p {
		return
	}
	s.mu.Lock()
	p.joined = true
	s.mu.Unlock()
	if s.cfg.OnPeer != nil {
		s.cfg.OnPeer(p.id, true)
	}
	if s.cfg.OnJoinFDs != nil {
		_ = rawControl(p.conn, func(fd int) { s.cfg.OnJoinFDs(p.id, fd, p.fds) })
	}
}

// dropPending removes p if it is still connected and has not joined, and
// reports why.
func (s *Server) dropPending(p *serverPeer, why error) {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	if s.closed || p.joined || s.peers[p.id] != p {
		return
	}
	s.removeLocked(p)
	s.refuse(p.cred, why)
}

// evictLocked frees a slot for a newcomer: it removes the oldest peer that
// is dead (its watcher has not removed it yet) or has not joined; with
// none, every slot is held by a peer that joined and it returns
// ErrPeersFull.
func (s *Server) evictLocked() error {
	var old *serverPeer
	for _, q := range s.peers {
		if (q.dead || !q.joined) && (old == nil || q.seq < old.seq) {
			old = q
		}
	}
	if old == nil {
		return fmt.Errorf("%d peers: %w", len(s.peers), ErrPeersFull)
	}
	pending := !old.joined
	s.removeLocked(old)
	if pending {
		s.refuse(old.cred, fmt.Errorf("peer %d: %w before a new connection needed its slot", old.id, ErrNoHandshake))
	}
	return nil
}

// handshakeMsgBytes is what one message of a handshake may take of a
// socket's send buffer (the kernel's accounting of an 8-byte message with
// an fd is about 1 KiB), with room to spare.
const handshakeMsgBytes = 2048

// roomForHandshake grows conn's send buffer to hold a whole handshake
// (with every peer slot taken), so that sending it never waits for a peer
// that does not read: ctl is held meanwhile, and every admission with it
// (64 channels' vectors overflow the default buffer). SO_SNDBUFFORCE
// where the server may (root), else SO_SNDBUF up to the system's maximum;
// a refusal leaves the default, and the write deadline then bounds the
// wait.
func (s *Server) roomForHandshake(conn *net.UnixConn) {
	msgs := 3 + s.cfg.Vectors*(s.cfg.MaxPeers+1)
	size := min(msgs*handshakeMsgBytes, 64<<20)
	_ = control(conn, func(fd int) {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size)
		}
	})
}
