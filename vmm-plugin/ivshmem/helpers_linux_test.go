package ivshmem

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/internal/shm"
	"golang.org/x/sys/unix"
)

// guard is the deadlock guard for waits in tests: generous, never a
// timing assertion.
const guard = 10 * time.Second

const shmSize = 1 << 16

// newMemfd returns a shared-memory fd closed at cleanup.
func newMemfd(t testing.TB) int {
	t.Helper()
	fd, err := shm.NewMemfd("ivshmem-test", shmSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// sockPath returns a socket path short enough for sun_path.
func sockPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ivs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s")
}

// doorbell is one OnDoorbell call.
type doorbell struct {
	vector int
	count  uint64
}

// testServer starts a server whose doorbells and peer events land in
// channels; cfg's SocketPath, ShmFD and callbacks are filled in if unset.
func testServer(t testing.TB, cfg ServerConfig) (*Server, <-chan doorbell, <-chan peerEvent) {
	t.Helper()
	bells := make(chan doorbell, 1024)
	events := make(chan peerEvent, 1024)
	if cfg.SocketPath == "" {
		cfg.SocketPath = sockPath(t)
	}
	if cfg.ShmFD == 0 {
		cfg.ShmFD = newMemfd(t)
	}
	if cfg.OnDoorbell == nil {
		cfg.OnDoorbell = func(v int, n uint64) { bells <- doorbell{v, n} }
	}
	if cfg.OnPeer == nil {
		cfg.OnPeer = func(id uint16, up bool) { events <- peerEvent{id, up} }
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, bells, events
}

type peerEvent struct {
	id        uint16
	connected bool
}

func recvBell(t testing.TB, ch <-chan doorbell) doorbell {
	t.Helper()
	select {
	case b := <-ch:
		return b
	case <-time.After(guard):
		t.Fatal("no doorbell delivered")
		return doorbell{}
	}
}

func recvPeerEvent(t testing.TB, ch <-chan peerEvent) peerEvent {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(guard):
		t.Fatal("no peer event")
		return peerEvent{}
	}
}

// waitReadable polls fd for input with the deadlock guard.
func waitReadable(t testing.TB, fd int) {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, int(guard/time.Millisecond))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("poll fd %d: %v", fd, err)
		}
		if n == 0 {
			t.Fatalf("fd %d not readable within %v", fd, guard)
		}
		return
	}
}

// readCounter reads an eventfd's counter (which must be readable).
func readCounter(t testing.TB, fd int) uint64 {
	t.Helper()
	var buf [8]byte
	n, ok, err := drain(fd, &buf)
	if err != nil || !ok {
		t.Fatalf("reading eventfd %d: ok=%v err=%v", fd, ok, err)
	}
	return n
}

// openFDs counts this process's open fds.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // the directory's own fd
}

// eventually polls cond until it holds or the guard expires.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settledGoroutines waits for the goroutine count to reach at most want.
func settledGoroutines(t testing.TB, want int) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d, want <= %d\n%s", runtime.NumGoroutine(), want, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func timeAfterGuard() <-chan time.Time { return time.After(guard) }
