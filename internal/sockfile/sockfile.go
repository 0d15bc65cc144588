// Package sockfile prepares a path for a UNIX socket listener: a stale
// socket (nobody listening) is removed, while a live socket, a socket it
// cannot prove dead, or anything that is not a socket is left alone and
// reported, so a misconfigured path never deletes a file or another daemon's
// socket. Probing means connecting: a live server sees a client come and go.
package sockfile

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// ErrInUse means a server is listening on the socket.
var ErrInUse = errors.New("socket in use")

// RemoveStale removes the socket at path if nothing listens on it. timeout
// bounds the probe.
func RemoveStale(path string, timeout time.Duration) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, timeout)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s: %w", path, ErrInUse)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("probing %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	return nil
}

// MaxPath is the longest path a UNIX socket may have on Linux: sun_path
// holds 108 bytes, the last a NUL.
const MaxPath = len(syscall.RawSockaddrUnix{}.Path) - 1

// ErrPathTooLong means a socket path does not fit in sun_path.
var ErrPathTooLong = errors.New("socket path too long")

// CheckPath refuses a path longer than MaxPath, which bind would refuse
// with a bare EINVAL.
func CheckPath(path string) error {
	if len(path) > MaxPath {
		return fmt.Errorf("socket path %s is %d bytes, more than the %d a UNIX socket path may have: %w", path, len(path), MaxPath, ErrPathTooLong)
	}
	return nil
}
