package ivshmem

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/internal/shm"
	"golang.org/x/sys/unix"
)

// rawPeer speaks the protocol straight from the spec with recvmsg, not
// through Client or msgReader, so that the server is checked against the
// wire format rather than against this package's own decoder.
type rawPeer struct {
	fd int
}

type rawMsg struct {
	val int64
	fds []int
}

func (m rawMsg) String() string { return fmt.Sprintf("%d/%dfd", m.val, len(m.fds)) }

func dialRaw(t *testing.T, path string) *rawPeer {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &rawPeer{fd: fd}
	t.Cleanup(p.close)
	tv := unix.NsecToTimeval(guard.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatalf("connect %s: %v", path, err)
	}
	return p
}

func (p *rawPeer) close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// recv reads one message: exactly 8 bytes, with whatever fds arrive with
// them. Received fds are closed at cleanup.
func (p *rawPeer) recv(t testing.TB) rawMsg {
	t.Helper()
	var b [8]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	var m rawMsg
	for n := 0; n < 8; {
		got, oobn, _, _, err := unix.Recvmsg(p.fd, b[n:], oob, unix.MSG_CMSG_CLOEXEC)
		if err != nil {
			t.Fatalf("recvmsg: %v", err)
		}
		if got == 0 {
			t.Fatalf("EOF after %d bytes of a message", n)
		}
		n += got
		if oobn > 0 {
			cms, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				t.Fatal(err)
			}
			for i := range cms {
				fds, err := unix.ParseUnixRights(&cms[i])
				if err != nil {
					t.Fatal(err)
				}
				m.fds = append(m.fds, fds...)
			}
		}
	}
	for _, fd := range m.fds {
		t.Cleanup(func() { unix.Close(fd) })
	}
	m.val = int64(binary.LittleEndian.Uint64(b[:]))
	return m
}

// expect reads len(want) messages and checks values and fd presence; it
// returns them.
func (p *rawPeer) expect(t testing.TB, want ...rawWant) []rawMsg {
	t.Helper()
	got := make([]rawMsg, len(want))
	for i, w := range want {
		got[i] = p.recv(t)
		wantFDs := 0
		if w.fd {
			wantFDs = 1
		}
		if got[i].val != w.val || len(got[i].fds) != wantFDs {
			t.Fatalf("message %d: got %v, want %d with %d fd", i, got[i], w.val, wantFDs)
		}
	}
	return got
}

// expectEOF checks the server closed the connection (and sent nothing more).
func (p *rawPeer) expectEOF(t testing.TB) {
	t.Helper()
	var b [8]byte
	n, err := unix.Read(p.fd, b[:])
	if n != 0 || err != nil {
		t.Fatalf("want EOF, got %d bytes, err %v", n, err)
	}
}

type rawWant struct {
	val int64
	fd  bool
}

// handshakeWant is the spec's connect sequence for a peer with id own when
// the peers in existing (host 0 first) are connected.
func handshakeWant(own int64, vectors int, existing ...int64) []rawWant {
	w := []rawWant{{0, false}, {own, false}, {-1, true}}
	for _, id := range append(existing, own) {
		for range vectors {
			w = append(w, rawWant{id, true})
		}
	}
	return w
}

func TestRawProtocol(t *testing.T) {
	const vectors = 3
	memfd := newMemfd(t)
	srv, bells, events := testServer(t, ServerConfig{ShmFD: memfd, Vectors: vectors})
	path := srv.cfg.SocketPath

	g1 := dialRaw(t, path)
	h1 := g1.expect(t, handshakeWant(1, vectors, 0)...)
	if e := recvPeerEvent(t, events); e != (peerEvent{1, true}) {
		t.Fatalf("peer event %v, want 1 connected", e)
	}

	g2 := dialRaw(t, path)
	h2 := g2.expect(t, handshakeWant(2, vectors, 0, 1)...)
	// The connect broadcast: g1 learns g2's eventfds.
	b1 := g1.expect(t, rawWant{2, true}, rawWant{2, true}, rawWant{2, true})
	if e := recvPeerEvent(t, events); e != (peerEvent{2, true}) {
		t.Fatalf("peer event %v, want 2 connected", e)
	}

	t.Run("shared memory is the caller's memfd", func(t *testing.T) {
		mine, err := shm.Map(memfd, shmSize)
		if err != nil {
			t.Fatal(err)
		}
		defer shm.Unmap(mine)
		for i, h := range [][]rawMsg{h1, h2} {
			theirs, err := shm.Map(h[2].fds[0], shmSize)
			if err != nil {
				t.Fatal(err)
			}
			mine[100+i] = byte(0xa0 + i)
			if theirs[100+i] != byte(0xa0+i) {
				t.Errorf("guest %d mapping does not share memory", i+1)
			}
			shm.Unmap(theirs)
		}
	})

	t.Run("host peer 0 eventfds ring OnDoorbell", func(t *testing.T) {
		for v := range vectors {
			if err := signal(h2[3+v].fds[0]); err != nil {
				t.Fatal(err)
			}
			if b := recvBell(t, bells); b != (doorbell{v, 1}) {
				t.Fatalf("doorbell %v, want vector %d count 1", b, v)
			}
		}
	})

	t.Run("own eventfds are the ones the server and peers signal", func(t *testing.T) {
		for v := range vectors {
			if err := srv.Notify(2, v); err != nil {
				t.Fatal(err)
			}
			own2 := h2[3+2*vectors+v].fds[0]
			waitReadable(t, own2)
			if n := readCounter(t, own2); n != 1 {
				t.Fatalf("count %d", n)
			}
			// g1 rings g2 through the broadcast copy.
			if err := signal(b1[v].fds[0]); err != nil {
				t.Fatal(err)
			}
			waitReadable(t, own2)
			readCounter(t, own2)
			// g2 rings g1 through the handshake copy of peer 1.
			if err := signal(h2[3+vectors+v].fds[0]); err != nil {
				t.Fatal(err)
			}
			own1 := h1[3+vectors+v].fds[0]
			waitReadable(t, own1)
			readCounter(t, own1)
		}
	})

	t.Run("disconnect broadcast", func(t *testing.T) {
		g1.close()
		g2.expect(t, rawWant{1, false})
		if e := recvPeerEvent(t, events); e != (peerEvent{1, false}) {
			t.Fatalf("peer event %v, want 1 disconnected", e)
		}
		if got := srv.Peers(); len(got) != 1 || got[0] != 2 {
			t.Fatalf("Peers() = %v, want [2]", got)
		}
	})

	t.Run("ids are not reused before wrapping", func(t *testing.T) {
		g3 := dialRaw(t, path)
		g3.expect(t, handshakeWant(3, vectors, 0, 2)...)
		g2.expect(t, rawWant{3, true}, rawWant{3, true}, rawWant{3, true})
		if e := recvPeerEvent(t, events); e != (peerEvent{3, true}) {
			t.Fatalf("peer event %v, want 3 connected", e)
		}
		g3.close()
		g2.expect(t, rawWant{3, false})
		if e := recvPeerEvent(t, events); e != (peerEvent{3, false}) {
			t.Fatalf("peer event %v, want 3 disconnected", e)
		}
	})

	t.Run("a peer that sends data is dropped", func(t *testing.T) {
		if _, err := unix.Write(g2.fd, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		g2.expectEOF(t)
		if e := recvPeerEvent(t, events); e != (peerEvent{2, false}) {
			t.Fatalf("peer event %v, want 2 disconnected", e)
		}
	})
}

// TestNonReadingPeerDropped checks that a peer that never reads cannot
// stall the server: with 256 vectors its handshake is dropped at the
// deadline, by the write deadline where it overflows the socket buffer (the
// server may not grow it), else because it is still unread.
func TestNonReadingPeerDropped(t *testing.T) {
	srv, _, events := testServer(t, ServerConfig{Vectors: MaxVectors, HandshakeTimeout: 200 * time.Millisecond})
	path := srv.cfg.SocketPath

	stuck := dialRaw(t, path)
	// Never read: wait for the server to hang up, without draining.
	pfd := []unix.PollFd{{Fd: int32(stuck.fd), Events: unix.POLLRDHUP}}
	eventually(t, "stuck peer dropped", func() bool {
		_, err := unix.Poll(pfd, 0)
		return err == nil && pfd[0].Revents&(unix.POLLHUP|unix.POLLRDHUP) != 0
	})
	if got := srv.Peers(); len(got) != 0 {
		t.Fatalf("Peers() = %v after dropping the stuck peer", got)
	}

	c, err := dialTest(t, path, MaxVectors)
	if err != nil {
		t.Fatalf("dial after a stuck peer: %v", err)
	}
	if e := recvPeerEvent(t, events); !e.connected || e.id != c.ID() {
		t.Fatalf("peer event %v, want %d connected", e, c.ID())
	}
}
