package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStateDirLock: a second daemon on a state dir in use refuses to start
// and names the holder's pid and the dir; once the first closes, it starts.
func TestStateDirLock(t *testing.T) {
	state := t.TempDir()
	first := newDaemon(t, "virtual", state)
	cfg := DefaultConfig()
	cfg.Socket = filepath.Join(t.TempDir(), "other.sock")
	cfg.StateDir = state
	cfg.Clock = "virtual"
	cfg.Proxy.Binary = "off"
	second, err := New(cfg)
	if err == nil {
		second.Close()
		t.Fatal("a second daemon started on a state dir in use")
	}
	pid := strconv.Itoa(os.Getpid())
	if !errors.Is(err, ErrStateDirLocked) || !strings.Contains(err.Error(), "process "+pid) || !strings.Contains(err.Error(), state) {
		t.Fatalf("second daemon: %v; want ErrStateDirLocked naming pid %s and %s", err, pid, state)
	}
	if b, err := os.ReadFile(filepath.Join(state, LockFile)); err != nil || strings.TrimSpace(string(b)) != pid {
		t.Fatalf("lock file holds %q, %v; want the pid %s", b, err, pid)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	third, err := New(cfg)
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}
}
