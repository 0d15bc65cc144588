package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"

	"golang.org/x/sys/unix"
)

// Adopt serves the host API on a listening UNIX socket handed over by a
// predecessor process (Detach): fd, listening at path.
func Adopt(fd int, path string, h http.Handler) (*Server, error) {
	f := os.NewFile(uintptr(fd), "host-api")
	ln, err := net.FileListener(f) // a dup
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("adopting the host api socket: %w", err)
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok || ul.Addr().String() != path {
		ln.Close()
		return nil, fmt.Errorf("adopting the host api socket: fd %d listens on %s, want %s", fd, ln.Addr(), path)
	}
	ul.SetUnlinkOnClose(true)
	return unixServer(ln, path, h), nil
}

// Detach stops serving for a hand-over: it waits for the requests in
// flight (as Shutdown does) and returns a duplicate of the listening
// socket, kept across exec, for the successor to Adopt. Connections that
// arrive meanwhile wait in the socket's backlog; the socket file stays.
func (s *Server) Detach(ctx context.Context) (int, error) {
	ul, ok := s.ln.(*net.UnixListener)
	if !ok {
		return -1, errors.New("detaching the host api: not a UNIX socket")
	}
	rc, err := ul.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("detaching the host api: %w", err)
	}
	fd := -1
	cerr := rc.Control(func(raw uintptr) { fd, err = unix.FcntlInt(raw, unix.F_DUPFD, 3) }) // no CLOEXEC
	if err = errors.Join(cerr, err); err != nil {
		return -1, fmt.Errorf("detaching the host api: %w", err)
	}
	ul.SetUnlinkOnClose(false)
	if err := s.Shutdown(ctx); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
