package ivshmem

import (
	"fmt"
	"net"
	"slices"

	"golang.org/x/sys/unix"
)

// Cred is a connecting peer's identity as the kernel recorded it when the
// peer called connect (SO_PEERCRED): it cannot be forged by the peer.
type Cred struct {
	PID      int32
	UID, GID uint32
}

// Owner is a user whose processes may connect: a peer matches when its uid
// is UID and, where HasGID is set, its gid is GID.
type Owner struct {
	UID    uint32
	GID    uint32
	HasGID bool
}

// String is UID or UID:GID.
func (o Owner) String() string {
	if o.HasGID {
		return fmt.Sprintf("%d:%d", o.UID, o.GID)
	}
	return fmt.Sprintf("%d", o.UID)
}

func (o Owner) matches(c Cred) bool {
	return c.UID == o.UID && (!o.HasGID || c.GID == o.GID)
}

// admits reports whether c may connect: root (it can read any process's
// memory, the server's included, so refusing it would protect nothing), the
// server's own uid (likewise) and the owners.
func (s *Server) admits(c Cred) bool {
	if c.UID == 0 || c.UID == s.uid {
		return true
	}
	for _, o := range *s.owners.Load() {
		if o.matches(c) {
			return true
		}
	}
	return false
}

// SetOwners replaces the users who may connect besides root and the
// server's own uid (ServerConfig.Owners) for the connections that follow;
// the peers connected stay.
func (s *Server) SetOwners(owners []Owner) {
	o := slices.Clone(owners)
	s.owners.Store(&o)
}

// peerCred reads the credentials of conn's peer.
func peerCred(conn *net.UnixConn) (Cred, error) {
	var uc *unix.Ucred
	var gerr error
	if err := control(conn, func(fd int) { uc, gerr = unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return Cred{}, err
	}
	if gerr != nil {
		return Cred{}, fmt.Errorf("reading the peer's credentials: %w", gerr)
	}
	return Cred{PID: uc.Pid, UID: uc.Uid, GID: uc.Gid}, nil
}

// unread is how much of what the server sent on conn its peer has not read
// yet (SIOCOUTQ: the memory of the sent messages still queued, 0 once the
// peer has read them all).
func unread(conn *net.UnixConn) (int, error) {
	var n int
	var ierr error
	if err := control(conn, func(fd int) { n, ierr = unix.IoctlGetInt(fd, unix.SIOCOUTQ) }); err != nil {
		return 0, err
	}
	if ierr != nil {
		return 0, fmt.Errorf("reading the peer's unread bytes: %w", ierr)
	}
	return n, nil
}

func control(conn *net.UnixConn, f func(fd int)) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("reaching the peer's socket: %w", err)
	}
	if err := rc.Control(func(fd uintptr) { f(int(fd)) }); err != nil {
		return fmt.Errorf("reaching the peer's socket: %w", err)
	}
	return nil
}
