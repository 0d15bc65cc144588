package ivshmem

import (
	"errors"
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
		s.admit(conn)
	}
}

// admit runs the handshake with a new connection and announces it to the
// other peers. A connection over MaxPeers, or one whose handshake cannot be
// sent in time, is closed.
func (s *Server) admit(conn *net.UnixConn) {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	if s.closed || len(s.peers) >= s.cfg.MaxPeers {
		conn.Close()
		return
	}
	fds, err := newEventfds(s.cfg.Vectors)
	if err != nil {
		conn.Close()
		return
	}
	p := &serverPeer{id: s.allocID(), conn: conn, fds: fds}
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
	if err := s.sendHandshake(p); err != nil {
		s.mu.Lock()
		delete(s.peers, p.id)
		s.mu.Unlock()
		p.close()
		return
	}
	testHookHandshakeSent()
	for _, q := range s.peers {
		if q != p && !q.dead {
			s.sendOrDrop(q, func() error { return sendVectors(q.conn, p.id, p.fds) })
		}
	}
	s.wg.Add(1)
	go s.watch(p)
	if s.cfg.OnPeer != nil {
		s.cfg.OnPeer(p.id, true)
	}
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
func (s *Server) sendHandshake(p *serverPeer) error {
	c := p.conn
	if err := c.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
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
	s.remove(p)
}

// remove forgets p, tells the remaining peers and closes p's fds.
func (s *Server) remove(p *serverPeer) {
	s.ctl.Lock()
	defer s.ctl.Unlock()
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
	if s.cfg.OnPeer != nil {
		s.cfg.OnPeer(p.id, false)
	}
}

func (p *serverPeer) close() {
	p.conn.Close()
	closeFDs(p.fds)
	p.fds = nil
}
