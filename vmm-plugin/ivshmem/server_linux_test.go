package ivshmem

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/sluice-gpu/sluice/internal/shm"
	"golang.org/x/sys/unix"
)

func dialTest(t testing.TB, path string, vectors int) (*Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	c, err := Dial(ctx, path, vectors)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func mustDial(t testing.TB, path string, vectors int) *Client {
	t.Helper()
	c, err := dialTest(t, path, vectors)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	return c
}

func TestClientServer(t *testing.T) {
	const vectors = 4
	memfd := newMemfd(t)
	srv, bells, events := testServer(t, ServerConfig{ShmFD: memfd, Vectors: vectors})
	path := srv.cfg.SocketPath

	a := mustDial(t, path, vectors)
	recvPeerEvent(t, events)
	b := mustDial(t, path, vectors)
	recvPeerEvent(t, events)
	if a.ID() != 1 || b.ID() != 2 || srv.HostPeerID() != 0 {
		t.Fatalf("ids: a=%d b=%d host=%d, want 1 2 0", a.ID(), b.ID(), srv.HostPeerID())
	}
	if got := srv.Peers(); !slices.Equal(got, []uint16{1, 2}) {
		t.Fatalf("server Peers() = %v", got)
	}
	if got := b.Peers(); !slices.Equal(got, []uint16{0, 1}) {
		t.Fatalf("b.Peers() = %v", got)
	}
	eventually(t, "a learns about b", func() bool { return slices.Equal(a.Peers(), []uint16{0, 2}) })

	t.Run("client Notify reaches OnDoorbell", func(t *testing.T) {
		for _, c := range []*Client{a, b} {
			for v := range vectors {
				if err := c.Notify(0, v); err != nil {
					t.Fatal(err)
				}
				if got := recvBell(t, bells); got != (doorbell{v, 1}) {
					t.Fatalf("doorbell %v, want vector %d count 1", got, v)
				}
			}
		}
	})

	t.Run("server Notify makes VectorFD readable", func(t *testing.T) {
		for v := range vectors {
			if err := srv.Notify(b.ID(), v); err != nil {
				t.Fatal(err)
			}
			waitReadable(t, b.VectorFD(v))
			if n := readCounter(t, b.VectorFD(v)); n != 1 {
				t.Fatalf("vector %d count %d", v, n)
			}
		}
	})

	t.Run("peers ring each other", func(t *testing.T) {
		if err := a.Notify(b.ID(), 3); err != nil {
			t.Fatal(err)
		}
		waitReadable(t, b.VectorFD(3))
		readCounter(t, b.VectorFD(3))
	})

	t.Run("shared memory", func(t *testing.T) {
		ma, err := shm.Map(a.ShmFD(), shmSize)
		if err != nil {
			t.Fatal(err)
		}
		defer shm.Unmap(ma)
		mb, err := shm.Map(b.ShmFD(), shmSize)
		if err != nil {
			t.Fatal(err)
		}
		defer shm.Unmap(mb)
		ra, rb := shm.New(ma), shm.New(mb)
		ra.Store64(4096, 0xfeedface_cafef00d)
		if got := rb.Load64(4096); got != 0xfeedface_cafef00d {
			t.Fatalf("read %#x through the other mapping", got)
		}
	})

	t.Run("bad notify arguments", func(t *testing.T) {
		for _, tc := range []struct {
			peer   uint16
			vector int
			want   error
		}{
			{peer: 9, vector: 0, want: ErrNoPeer},
			{peer: a.ID(), vector: 0, want: ErrNoPeer}, // itself
			{peer: 0, vector: vectors, want: ErrBadVector},
			{peer: 0, vector: -1, want: ErrBadVector},
		} {
			if err := a.Notify(tc.peer, tc.vector); !errors.Is(err, tc.want) {
				t.Errorf("a.Notify(%d, %d) = %v, want %v", tc.peer, tc.vector, err, tc.want)
			}
		}
		if err := srv.Notify(0, 0); !errors.Is(err, ErrNoPeer) {
			t.Errorf("srv.Notify(0, 0) = %v, want ErrNoPeer", err)
		}
		if err := srv.Notify(a.ID(), vectors); !errors.Is(err, ErrBadVector) {
			t.Errorf("srv.Notify(a, %d) = %v, want ErrBadVector", vectors, err)
		}
		if fd := a.VectorFD(vectors); fd != -1 {
			t.Errorf("VectorFD(%d) = %d, want -1", vectors, fd)
		}
	})

	t.Run("client Notify does not allocate", func(t *testing.T) {
		if n := testing.AllocsPerRun(100, func() { a.Notify(0, 0) }); n != 0 {
			t.Fatalf("%v allocations per Notify", n)
		}
	})

	t.Run("disconnect is seen by the other client", func(t *testing.T) {
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if err := a.Notify(0, 0); !errors.Is(err, ErrClosed) {
			t.Fatalf("Notify after Close = %v", err)
		}
		eventually(t, "b forgets a", func() bool { return slices.Equal(b.Peers(), []uint16{0}) })
		if err := b.Notify(1, 0); !errors.Is(err, ErrNoPeer) {
			t.Fatalf("Notify to a gone peer = %v", err)
		}
	})

	t.Run("server Close ends clients", func(t *testing.T) {
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.Done():
		case <-timeAfterGuard():
			t.Fatal("client did not notice the server closing")
		}
		if err := b.Err(); !errors.Is(err, ErrServerGone) {
			t.Fatalf("b.Err() = %v, want ErrServerGone", err)
		}
		if err := srv.Notify(b.ID(), 0); !errors.Is(err, ErrClosed) {
			t.Fatalf("Notify after Close = %v", err)
		}
	})
}

func TestMaxPeers(t *testing.T) {
	srv, _, events := testServer(t, ServerConfig{Vectors: 1, MaxPeers: 2})
	path := srv.cfg.SocketPath
	mustDial(t, path, 1)
	recvPeerEvent(t, events)
	c2 := mustDial(t, path, 1)
	recvPeerEvent(t, events)
	if _, err := dialTest(t, path, 1); err == nil {
		t.Fatal("third peer admitted with MaxPeers 2")
	}
	c2.Close()
	if e := recvPeerEvent(t, events); e != (peerEvent{2, false}) {
		t.Fatalf("peer event %v", e)
	}
	c3 := mustDial(t, path, 1)
	if c3.ID() != 3 {
		t.Fatalf("id %d after a free slot, want 3 (no early reuse)", c3.ID())
	}
}

func TestAllocIDWraps(t *testing.T) {
	s := &Server{nextID: MaxPeerID, peers: map[uint16]*serverPeer{1: {}, 3: {}}}
	for _, want := range []uint16{MaxPeerID, 2, 4} {
		id := s.allocID()
		if id != want {
			t.Fatalf("allocID() = %d, want %d", id, want)
		}
		s.peers[id] = &serverPeer{}
	}
}

func TestSocketFile(t *testing.T) {
	t.Run("default mode", func(t *testing.T) {
		srv, _, _ := testServer(t, ServerConfig{Vectors: 1})
		checkMode(t, srv.cfg.SocketPath, 0o660)
	})
	t.Run("custom mode", func(t *testing.T) {
		srv, _, _ := testServer(t, ServerConfig{Vectors: 1, SocketMode: 0o600})
		checkMode(t, srv.cfg.SocketPath, 0o600)
	})
	t.Run("stale socket replaced", func(t *testing.T) {
		path := sockPath(t)
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		ln.Close()
		srv, _, _ := testServer(t, ServerConfig{SocketPath: path, Vectors: 1})
		mustDial(t, srv.cfg.SocketPath, 1)
	})
	t.Run("live socket refused", func(t *testing.T) {
		path := sockPath(t)
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		_, err = NewServer(ServerConfig{SocketPath: path, ShmFD: newMemfd(t), Vectors: 1, OnDoorbell: func(int, uint64) {}})
		if !errors.Is(err, ErrSocketInUse) {
			t.Fatalf("NewServer on a live socket: %v, want ErrSocketInUse", err)
		}
	})
	t.Run("other file left alone", func(t *testing.T) {
		path := sockPath(t)
		if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := NewServer(ServerConfig{SocketPath: path, ShmFD: newMemfd(t), Vectors: 1, OnDoorbell: func(int, uint64) {}})
		if err == nil {
			t.Fatal("NewServer replaced a regular file")
		}
		if b, _ := os.ReadFile(path); string(b) != "keep" {
			t.Fatalf("file changed to %q", b)
		}
	})
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != want {
		t.Fatalf("%s mode %v, want socket %v", path, fi.Mode(), want)
	}
}

func TestBadConfig(t *testing.T) {
	memfd := newMemfd(t)
	ok := func(int, uint64) {}
	good := ServerConfig{SocketPath: sockPath(t), ShmFD: memfd, Vectors: 1, OnDoorbell: ok}
	for _, tc := range []struct {
		name string
		edit func(*ServerConfig)
	}{
		{"empty path", func(c *ServerConfig) { c.SocketPath = "" }},
		{"path too long", func(c *ServerConfig) { c.SocketPath = "/tmp/" + string(make([]byte, 200)) }},
		{"missing directory", func(c *ServerConfig) { c.SocketPath = "/nonexistent/dir/s" }},
		{"mode beyond permissions", func(c *ServerConfig) { c.SocketMode = os.ModeSetuid | 0o660 }},
		{"negative shm fd", func(c *ServerConfig) { c.ShmFD = -1 }},
		{"closed shm fd", func(c *ServerConfig) { c.ShmFD = 1 << 20 }},
		{"zero vectors", func(c *ServerConfig) { c.Vectors = 0 }},
		{"too many vectors", func(c *ServerConfig) { c.Vectors = MaxVectors + 1 }},
		{"negative max peers", func(c *ServerConfig) { c.MaxPeers = -1 }},
		{"too many max peers", func(c *ServerConfig) { c.MaxPeers = MaxPeerID + 1 }},
		{"no doorbell handler", func(c *ServerConfig) { c.OnDoorbell = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := openFDs(t)
			cfg := good
			tc.edit(&cfg)
			s, err := NewServer(cfg)
			if err == nil {
				s.Close()
				t.Fatal("config accepted")
			}
			if after := openFDs(t); after != before {
				t.Fatalf("fds: %d before, %d after a failed NewServer", before, after)
			}
		})
	}
	if _, err := os.Stat(good.SocketPath); !os.IsNotExist(err) {
		t.Fatalf("socket file left behind: %v", err)
	}
	if _, err := Dial(context.Background(), good.SocketPath, 0); err == nil {
		t.Fatal("Dial accepted 0 vectors")
	}
}

// TestCloseCleansUp checks that Close leaves no goroutine, fd or socket
// file behind, with clients connected and doorbells flowing.
func TestCloseCleansUp(t *testing.T) {
	memfd := newMemfd(t)
	warm, _, _ := testServer(t, ServerConfig{ShmFD: memfd, Vectors: 2})
	mustDial(t, warm.cfg.SocketPath, 2).Close() // the runtime's poller fds open lazily
	warm.Close()
	settledGoroutines(t, runtime.NumGoroutine())

	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	path := sockPath(t)
	srv, err := NewServer(ServerConfig{SocketPath: path, ShmFD: memfd, Vectors: 2, OnDoorbell: func(int, uint64) {}})
	if err != nil {
		t.Fatal(err)
	}
	var clients []*Client
	for range 3 {
		c, err := Dial(context.Background(), path, 2)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		if err := c.Notify(0, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file still there: %v", err)
	}
	for _, c := range clients {
		<-c.Done()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	settledGoroutines(t, goroutines)
	if after := openFDs(t); after != fds {
		t.Fatalf("fds: %d before, %d after", fds, after)
	}
	if _, err := unix.FcntlInt(uintptr(memfd), unix.F_GETFD, 0); err != nil {
		t.Fatalf("the caller's shm fd was closed: %v", err)
	}
}
