package ivshmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// msgReader reads wire messages from a stream socket.
type msgReader struct {
	conn *net.UnixConn
	buf  [8]byte
	// oob has room for more fds than the protocol allows so that a
	// sender's extras are received (and closed) rather than truncated.
	oob []byte
}

func newMsgReader(conn *net.UnixConn) *msgReader {
	return &msgReader{conn: conn, oob: make([]byte, unix.CmsgSpace(8*4))}
}

// read returns the next message's value and every fd received while its 8
// bytes were read. It reads at most the bytes still missing from this
// message: the kernel hands over an fd with the first byte of the send it
// came with, and never merges bytes past a send that carries fds, so fds
// cannot leak into the wrong message even when the 8 bytes arrive split.
// The caller owns the returned fds, also alongside an error.
func (r *msgReader) read() (int64, []int, error) {
	var fds []int
	n := 0
	for n < len(r.buf) {
		m, oobn, flags, _, err := r.conn.ReadMsgUnix(r.buf[n:], r.oob)
		if oobn > 0 {
			got, perr := parseRights(r.oob[:oobn])
			fds = append(fds, got...)
			if perr != nil && err == nil {
				err = perr
			}
		}
		if err == nil && flags&unix.MSG_CTRUNC != 0 {
			err = errors.New("control message truncated: too many fds")
		}
		n += m
		if err == nil && m == 0 {
			err = io.EOF
		}
		if err != nil {
			if errors.Is(err, io.EOF) && n > 0 {
				err = io.ErrUnexpectedEOF
			}
			return 0, fds, fmt.Errorf("reading message: %w", err)
		}
	}
	return int64(binary.LittleEndian.Uint64(r.buf[:])), fds, nil
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parsing control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return fds, fmt.Errorf("parsing SCM_RIGHTS: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// writeMsg sends one message: val, and fd as SCM_RIGHTS unless fd < 0. The
// caller sets the write deadline.
func writeMsg(conn *net.UnixConn, val int64, fd int) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(val))
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	n, _, err := conn.WriteMsgUnix(b[:], oob, nil)
	if err != nil {
		return fmt.Errorf("sending message %d: %w", val, err)
	}
	if n != len(b) {
		return fmt.Errorf("sending message %d: short write of %d bytes", val, n)
	}
	return nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
