package ivshmem

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// slots is how many peer slots are taken, by peers that joined or not.
func (s *Server) slots() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.peers)
}

// hungUp reports whether the server has closed p's connection, without
// reading from it.
func (p *rawPeer) hungUp() bool {
	pfd := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLRDHUP}}
	_, err := unix.Poll(pfd, 0)
	return err == nil && pfd[0].Revents&(unix.POLLHUP|unix.POLLRDHUP) != 0
}

// refusingServer is testServer with OnRefuse reported on a channel.
func refusingServer(t *testing.T, cfg ServerConfig) (*Server, <-chan peerEvent, <-chan refusal) {
	t.Helper()
	refused := make(chan refusal, 64)
	cfg.OnRefuse = func(c Cred, why error) { refused <- refusal{c, why} }
	srv, _, events := testServer(t, cfg)
	return srv, events, refused
}

func noPeerEvent(t *testing.T, events <-chan peerEvent) {
	t.Helper()
	select {
	case e := <-events:
		t.Fatalf("peer event %v, want none", e)
	default:
	}
}

// TestHandshakeDeadline: a peer that connects and never reads its
// handshake never joins and is dropped at the deadline, not before.
func TestHandshakeDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	srv, events, refused := refusingServer(t, ServerConfig{Vectors: 2, HandshakeTimeout: timeout})
	start := time.Now()
	stuck := dialRaw(t, srv.cfg.SocketPath)
	eventually(t, "the peer admitted", func() bool { return srv.slots() == 1 })
	if got := srv.Peers(); len(got) != 0 {
		t.Fatalf("Peers() = %v while the handshake is unread", got)
	}
	r := recvRefusal(t, refused)
	if waited := time.Since(start); waited < timeout {
		t.Fatalf("dropped after %v, before the %v deadline", waited, timeout)
	}
	if !errors.Is(r.why, ErrNoHandshake) || r.cred.PID != int32(os.Getpid()) || r.cred.UID != uint32(os.Geteuid()) {
		t.Fatalf("refusal %+v, want ErrNoHandshake with this process's credentials", r)
	}
	eventually(t, "the stuck peer hung up", stuck.hungUp)
	if n := srv.slots(); n != 0 {
		t.Fatalf("%d slots taken after the deadline, want 0", n)
	}
	noPeerEvent(t, events)
}

// TestSlowReaderJoins: a peer that reads its handshake late, but before
// the deadline, joins.
func TestSlowReaderJoins(t *testing.T) {
	srv, events, refused := refusingServer(t, ServerConfig{Vectors: 2, HandshakeTimeout: guard})
	slow := dialRaw(t, srv.cfg.SocketPath)
	eventually(t, "the peer admitted", func() bool { return srv.slots() == 1 })
	time.Sleep(100 * time.Millisecond)
	noPeerEvent(t, events)
	slow.expect(t, handshakeWant(1, 2, 0)...)
	if e := recvPeerEvent(t, events); e != (peerEvent{1, true}) {
		t.Fatalf("peer event %v, want 1 joined", e)
	}
	if got := srv.Peers(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("Peers() = %v, want [1]", got)
	}
	select {
	case r := <-refused:
		t.Fatalf("refusal %v for a peer that read its handshake", r.why)
	default:
	}
}

// TestNonReadersKeepNoOneOut: connections that never read take every slot;
// each real guest that comes takes the slot of the oldest of them at once,
// and only guests that joined make the server full.
func TestNonReadersKeepNoOneOut(t *testing.T) {
	const maxPeers = 4
	srv, events, refused := refusingServer(t, ServerConfig{Vectors: 2, MaxPeers: maxPeers, HandshakeTimeout: time.Minute})
	path := srv.cfg.SocketPath
	var stuck []*rawPeer
	for i := range maxPeers {
		stuck = append(stuck, dialRaw(t, path))
		eventually(t, "the non-reader admitted", func() bool { return srv.slots() == i+1 })
	}
	for i := range maxPeers {
		c := mustDial(t, path, 2)
		if e := recvPeerEvent(t, events); e != (peerEvent{c.ID(), true}) {
			t.Fatalf("peer event %v, want %d joined", e, c.ID())
		}
		r := recvRefusal(t, refused)
		if !errors.Is(r.why, ErrNoHandshake) || !strings.Contains(r.why.Error(), "needed its slot") {
			t.Fatalf("guest %d: refusal %v, want a non-reader evicted", i, r.why)
		}
		eventually(t, "the oldest non-reader hung up", stuck[i].hungUp)
		for _, p := range stuck[i+1:] {
			if p.hungUp() {
				t.Fatal("a newer non-reader evicted before the oldest")
			}
		}
	}
	if _, err := dialTest(t, path, 2); err == nil {
		t.Fatalf("a guest admitted past %d joined peers", maxPeers)
	}
	if r := recvRefusal(t, refused); !errors.Is(r.why, ErrPeersFull) {
		t.Fatalf("refusal %v, want ErrPeersFull", r.why)
	}
}

// TestSlotsFreedAtDeadline: the slots of connections that never read are
// free again at the handshake deadline, without a newcomer.
func TestSlotsFreedAtDeadline(t *testing.T) {
	const maxPeers = 4
	srv, events, refused := refusingServer(t, ServerConfig{Vectors: 2, MaxPeers: maxPeers, HandshakeTimeout: 200 * time.Millisecond})
	path := srv.cfg.SocketPath
	for range maxPeers {
		dialRaw(t, path)
	}
	for range maxPeers {
		if r := recvRefusal(t, refused); !errors.Is(r.why, ErrNoHandshake) {
			t.Fatalf("refusal %v, want ErrNoHandshake", r.why)
		}
	}
	if n := srv.slots(); n != 0 {
		t.Fatalf("%d slots taken after every non-reader's deadline", n)
	}
	noPeerEvent(t, events)
	for range maxPeers {
		c := mustDial(t, path, 2)
		if e := recvPeerEvent(t, events); e != (peerEvent{c.ID(), true}) {
			t.Fatalf("peer event %v, want %d joined", e, c.ID())
		}
	}
	select {
	case r := <-refused:
		t.Fatalf("refusal %v with every slot free", r.why)
	default:
	}
}

// TestNonReaderDoesNotStallAdmission: a handshake too large for a default
// socket buffer (64 channels' vectors, every slot taken) is sent to a peer
// that never reads without holding up the next guest's admission.
func TestNonReaderDoesNotStallAdmission(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: SO_SNDBUFFORCE past the system's maximum buffer")
	}
	const vectors, maxPeers = 66, 5
	srv, events, _ := refusingServer(t, ServerConfig{Vectors: vectors, MaxPeers: maxPeers, HandshakeTimeout: time.Minute})
	path := srv.cfg.SocketPath
	for range maxPeers - 2 {
		mustDial(t, path, vectors)
		recvPeerEvent(t, events)
	}
	stuck := dialRaw(t, path)
	eventually(t, "the non-reader admitted", func() bool { return srv.slots() == maxPeers-1 })
	// Admission waits for the non-reader's handshake to be sent: with no
	// room for it, for the minute of its deadline, past dialTest's guard.
	c := mustDial(t, path, vectors)
	if e := recvPeerEvent(t, events); e != (peerEvent{c.ID(), true}) {
		t.Fatalf("peer event %v, want %d joined", e, c.ID())
	}
	if stuck.hungUp() {
		t.Fatal("the non-reader was dropped: its handshake did not fit")
	}
}
