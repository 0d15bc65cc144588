package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockFile is the name of the state directory's lock, held by the one
// sluiced that uses the directory.
const LockFile = "sluiced.lock"

// ErrStateDirLocked is returned by New when another process holds the
// state directory's lock.
var ErrStateDirLocked = errors.New("state dir in use")

// stateLock is an exclusive flock on STATE_DIR/sluiced.lock. The kernel
// drops it when the descriptor closes, also when the process dies
// (kill -9), so a stale lock file never keeps a daemon from starting; the
// pid written into it only names the holder in the second daemon's error.
type stateLock struct{ f *os.File }

// lockStateDir takes the state directory's lock without waiting, or fails
// with ErrStateDirLocked naming the holder's pid. Two daemons on one state
// dir would each rewrite usage.json and vms.json from their own memory,
// losing the other's billing data.
func lockStateDir(dir string) (*stateLock, error) {
	path := filepath.Join(dir, LockFile)
	// os.OpenFile sets O_CLOEXEC: the proxies sluiced starts do not inherit
	// the lock and cannot keep it past the daemon.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("opening the state dir lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = fmt.Sprintf("process %d", pid)
			}
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("state dir %s is used by %s (another sluiced? it holds %s): %w", dir, holder, path, ErrStateDirLocked)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := writePid(f, path); err != nil {
		f.Close()
		return nil, err
	}
	return &stateLock{f: f}, nil
}

// writePid makes the lock file name its holder.
func writePid(f *os.File, path string) error {
	err := f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		return fmt.Errorf("writing the pid into %s: %w", path, err)
	}
	return nil
}

// release drops the lock; the file stays (removing it would race with a
// daemon that opened it and waits to lock it). Safe to call twice.
func (l *stateLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
