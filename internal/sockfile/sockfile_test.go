package sockfile

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	if err := RemoveStale(filepath.Join(dir, "none"), time.Second); err != nil {
		t.Fatalf("missing path: %v", err)
	}

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveStale(file, time.Second); err == nil {
		t.Fatal("a regular file was accepted")
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("regular file touched: %v", err)
	}

	live := filepath.Join(dir, "live.sock")
	ln, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := RemoveStale(live, time.Second); !errors.Is(err, ErrInUse) {
		t.Fatalf("live socket: %v, want ErrInUse", err)
	}

	stale := filepath.Join(dir, "stale.sock")
	l2, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l2.(*net.UnixListener).SetUnlinkOnClose(false)
	l2.Close()
	if err := RemoveStale(stale, time.Second); err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale socket not removed: %v", err)
	}
}
