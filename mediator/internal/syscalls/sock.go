package syscalls

import (
	"fmt"
	"net"
	"runtime"
	"time"

	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
	"golang.org/x/sys/unix"
)

// sock is the forwarder's end of a proxy's socket as a blocking descriptor
// of its own. The receiver blocks in recvmsg on a thread of its own instead
// of Go's network poller: the poller and a sim backend's GPU threads spin
// (runtime.Gosched), and Go polls the network only when nothing else is
// runnable or every 10 ms, which would put that on every result.
type sock struct{ fd int }

// newSock duplicates conn's descriptor and makes it blocking. conn must not
// be used for I/O afterwards (its descriptor shares the blocking mode).
func newSock(conn *net.UnixConn) (*sock, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	if err := raw.Control(func(c uintptr) { fd, derr = unix.FcntlInt(c, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("duplicating the proxy's socket: %w", derr)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &sock{fd: fd}, nil
}

var kickMsg = []byte{proxyproto.MsgKick}

// kick tells a sleeping proxy to look at its request ring. It never blocks:
// a full socket already holds kicks.
func (s *sock) kick() {
	_ = unix.Sendmsg(s.fd, kickMsg, nil, nil, unix.MSG_DONTWAIT)
}

// sendRing sends the rings' memfd (MsgRing, SCM_RIGHTS), and the syscall
// area's after it when a.Slots is not 0.
func (s *sock) sendRing(l proxyproto.RingLayout, fd int, a proxyproto.AreaSpec, areaFD int) error {
	fds := []int{fd}
	if a.Slots > 0 {
		fds = append(fds, areaFD)
	}
	return unix.Sendmsg(s.fd, proxyproto.AppendRing(nil, l, a), unix.UnixRights(fds...), nil, 0)
}

// recv reads one datagram (and its descriptors' control message).
func (s *sock) recv(buf, oob []byte) (n, oobn int, err error) {
	for {
		n, oobn, _, _, err = unix.Recvmsg(s.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			return n, oobn, err
		}
	}
}

// recvTimeout is recv with a deadline (the handshake).
func (s *sock) recvTimeout(buf []byte, d time.Duration) (int, error) {
	tv := unix.NsecToTimeval(d.Nanoseconds())
	if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, err
	}
	n, _, err := s.recv(buf, nil)
	zero := unix.Timeval{}
	if serr := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &zero); err == nil {
		err = serr
	}
	return n, err
}

// shutdown ends both directions, which wakes a blocked recv.
func (s *sock) shutdown() { _ = unix.Shutdown(s.fd, unix.SHUT_RDWR) }

func (s *sock) close() { unix.Close(s.fd) }

// lockThread keeps a blocking receiver on its own thread.
func lockThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
