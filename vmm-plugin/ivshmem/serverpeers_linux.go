package ivshmem

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"time"
)

// testHookHandshakeSent runs after a peer's handshake is sent; tests slow
// the admission down with it.
var testHookHandshakeSent = func() {}

// acceptBackoff is how long the accept loop waits after a failed accept
// (out of fds, say) so that it does not spin.
const acceptBackoff = 50 * time.Millisecond

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-s.done:
				return
			case <-time.After(acceptBackoff):
			}
			continue
		}
		s.accept(conn)
	}
}

// accept admits a new connection whose peer's user may connect; any other
// is closed (before it gets the memory or an eventfd) and reported.
func (s *Server) accept(conn *net.UnixConn) {
	cred, err := peerCred(conn)
	if err == nil && !s.admits(cred) {
		err = fmt.Errorf("pid %d, uid %d, gid %d: %w", cred.PID, cred.UID, cred.GID, ErrForeignPeer)
	}
	if err == nil {
		err = s.admit(conn, cred)
	}
	if err != nil {
		conn.Close()
		s.refuse(cred, err)
	}
}

func (s *Server) refuse(c Cred, why error) {
	if s.cfg.OnRefuse != nil {
		s.cfg.OnRefuse(c, why)
	}
}

// admit runs the handshake with a new connection and announces it to the
// other peers; it joins once it has read the handshake (awaitHandshake).
// With every slot taken, the oldest peer that has not read its handshake
// yet makes room; with none, the connection is refused. An error leaves
// conn to the caller.
func (s *Server) admit(conn *net.UnixConn, cred Cred) error {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	if s.closed {
		return ErrClosed
	}
	if len(s.peers) >= s.cfg.MaxPeers {
		if err := s.evictLocked(); err != nil {
			return err
		}
	}
	fds, err := newEventfds(s.cfg.Vectors)
	if err != nil {
		return fmt.Errorf("creating a new peer's eventfds: %w", err)
	}
	deadline := time.Now().Add(s.cfg.HandshakeTimeout)
	s.nextSeq++
	p := &serverPeer{id: s.allocID(), cred: cred, seq: s.nextSeq, conn: conn, fds: fds, gone: make(chan struct{})}
	// In the peer set before the handshake goes out: the peer may be
	// signalled (Notify) as soon as it holds its eventfds, which is as
	// soon as it has read the handshake. A guest that sleeps on its first
	// command's completion is signalled at once (a signal sent while it
	// was missing from the set would be lost, and the guest with it).
	if s.cfg.OnAdmit != nil {
		s.cfg.OnAdmit()
	}
	s.mu.Lock()
	s.peers[p.id] = p
	s.mu.Unlock()
	s.roomForHandshake(conn)
	if err := s.sendHandshake(p, deadline); err != nil {
		// Not announced yet: forget it without telling anyone.
		s.mu.Lock()
		delete(s.peers, p.id)
		s.mu.Unlock()
		p.close()
		return fmt.Errorf("sending peer %d its handshake: %w", p.id, err)
	}
	testHookHandshakeSent()
	for _, q := range s.peers {
		if q != p && !q.dead {
			s.sendOrDrop(q, func() error { return sendVectors(q.conn, p.id, p.fds) })
		}
	}
	s.wg.Add(2)
	go s.watch(p)
	go s.awaitHandshake(p, deadline)
	return nil
}

// allocID returns the next free guest id, counting up from 1 and wrapping
// so that a freed id is reused as late as possible; 0 is the host's. The
// caller holds ctl and has checked that fewer than MaxPeers (< 65535)
// peers are connected, so a free id exists.
func (s *Server) allocID() uint16 {
	for {
		id := s.nextID
		s.nextID++
		if s.nextID == 0 {
			s.nextID = 1
		}
		if _, used := s.peers[id]; !used {
			return id
		}
	}
}

// sendHandshake sends, in order: version, id, shared memory, every
// existing peer's eventfds (the host peer's first), p's own eventfds.
func (s *Server) sendHandshake(p *serverPeer, deadline time.Time) error {
	c := p.conn
	if err := c.SetWriteDeadline(deadline); err != nil {
		return err
	}
	if err := writeMsg(c, ProtocolVersion, -1); err != nil {
		return err
	}
	if err := writeMsg(c, int64(p.id), -1); err != nil {
		return err
	}
	if err := writeMsg(c, shmMessage, s.shm); err != nil {
		return err
	}
	if err := sendVectors(c, hostPeerID, s.hostFDs); err != nil {
		return err
	}
	for _, q := range s.sortedPeers() {
		if !q.dead && q != p {
			if err := sendVectors(c, q.id, q.fds); err != nil {
				return err
			}
		}
	}
	return sendVectors(c, p.id, p.fds)
}

// sortedPeers lists the connected peers by id; the caller holds ctl.
func (s *Server) sortedPeers() []*serverPeer {
	out := make([]*serverPeer, 0, len(s.peers))
	for _, p := range s.peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *serverPeer) int { return int(a.id) - int(b.id) })
	return out
}

func sendVectors(c *net.UnixConn, id uint16, fds []int) error {
	for _, fd := range fds {
		if err := writeMsg(c, int64(id), fd); err != nil {
			return err
		}
	}
	return nil
}

// sendOrDrop sends to q under a fresh deadline; if that fails q is marked
// dead and its connection closed, and its watcher removes it.
func (s *Server) sendOrDrop(q *serverPeer, send func() error) {
	err := q.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err == nil {
		err = send()
	}
	if err != nil {
		q.dead = true
		q.conn.Close()
	}
}

// watch waits for p's connection to end. Peers never send: any data is a
// protocol violation and drops the peer, like EOF does.
func (s *Server) watch(p *serverPeer) {
	defer s.wg.Done()
	var b [64]byte
	for {
		n, err := p.conn.Read(b[:])
		if n > 0 || err != nil {
			break
		}
	}
	close(p.gone)
	s.remove(p)
}

// remove forgets p, tells the remaining peers and closes p's fds.
func (s *Server) remove(p *serverPeer) {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	s.removeLocked(p)
}

// removeLocked does remove's work under ctl; p gone already (evicted,
// dropped at its deadline) is left alone.
func (s *Server) removeLocked(p *serverPeer) {
	if s.peers[p.id] != p || s.exported {
		return
	}
	s.mu.Lock()
	delete(s.peers, p.id)
	s.mu.Unlock()
	if !s.closed {
		for _, q := range s.peers {
			if !q.dead {
				s.sendOrDrop(q, func() error { return writeMsg(q.conn, int64(p.id), -1) })
			}
		}
	}
	p.close()
	if p.joined && s.cfg.OnPeer != nil {
		s.cfg.OnPeer(p.id, false)
	}
}

func (p *serverPeer) close() {
	p.conn.Close()
	closeFDs(p.fds)
	p.fds = nil
}
