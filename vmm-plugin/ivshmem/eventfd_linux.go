package ivshmem

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// one is the 8-byte counter increment that rings a doorbell, kept global
// so the hot path does not allocate.
var one = func() (b [8]byte) {
	binary.NativeEndian.PutUint64(b[:], 1)
	return b
}()

func newEventfd() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("creating eventfd: %w", err)
	}
	return fd, nil
}

func newEventfds(n int) ([]int, error) {
	fds := make([]int, 0, n)
	for range n {
		fd, err := newEventfd()
		if err != nil {
			closeFDs(fds)
			return nil, err
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// signal adds 1 to an eventfd. The other side shares the eventfd and may
// have written a huge value; every eventfd here is non-blocking, so a
// saturated counter gives EAGAIN instead of a hang. A saturated counter is
// already readable, so the doorbell is pending and that counts as success.
func signal(fd int) error {
	for {
		_, err := unix.Write(fd, one[:])
		switch err {
		case nil, unix.EAGAIN:
			return nil
		case unix.EINTR:
			continue
		}
		return fmt.Errorf("signalling eventfd %d: %w", fd, err)
	}
}

// drain reads and resets an eventfd's counter; ok is false when nothing
// was pending.
func drain(fd int, buf *[8]byte) (count uint64, ok bool, err error) {
	for {
		_, err := unix.Read(fd, buf[:])
		switch {
		case err == nil:
			return binary.NativeEndian.Uint64(buf[:]), true, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("reading eventfd %d: %w", fd, err)
	}
}
