package pci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// msix holds one eventfd per MSI-X vector of a device bound to vfio-pci:
// the guest's kernel signals a vector's eventfd when the device raises the
// vector. The eventfds are non-blocking os.Files, so a waiter parks in the Go
// runtime's poller and a context ends its wait through a read deadline.
type msix struct {
	fds []*os.File
}

// enableMSIX makes an eventfd per vector of dev and has VFIO signal them.
func enableMSIX(v *vfioDevice) (*msix, error) {
	n, err := v.msixVectors()
	if err != nil {
		return nil, err
	}
	m := &msix{}
	raw := make([]int32, n)
	for i := range raw {
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			m.close()
			return nil, fmt.Errorf("eventfd for vector %d: %w", i, err)
		}
		raw[i] = int32(fd)
		m.fds = append(m.fds, os.NewFile(uintptr(fd), fmt.Sprintf("msix-%d", i)))
	}
	if err := setIRQs(v.dev, vfioPCIMSIXIndex, 0, raw, vfioIRQDataEventfd|vfioIRQTrigger); err != nil {
		m.close()
		return nil, fmt.Errorf("enabling MSI-X with %d vectors: %w", n, err)
	}
	return m, nil
}

func (m *msix) file(vector int) (*os.File, error) {
	if m == nil || vector < 0 || vector >= len(m.fds) {
		return nil, fmt.Errorf("vector %d of %d: %w", vector, len(m.fds), ErrNoInterrupts)
	}
	return m.fds[vector], nil
}

// clear drops vector's pending signals.
func (m *msix) clear(vector int) error {
	f, err := m.file(vector)
	if err != nil {
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var b [8]byte
	var rerr error
	// Control, not Read: Read would fail on the deadline a wait left.
	if err := rc.Control(func(fd uintptr) {
		if _, err := unix.Read(int(fd), b[:]); err != nil && err != unix.EAGAIN {
			rerr = err
		}
	}); err != nil {
		return err
	}
	return rerr
}

// wait blocks until vector is signalled (consuming the signal) or ctx
// ends. Calls for one vector must not overlap.
func (m *msix) wait(ctx context.Context, vector int) error {
	f, err := m.file(vector)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dl, _ := ctx.Deadline() // zero: none
	if err := f.SetReadDeadline(dl); err != nil {
		return err
	}
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		f.SetReadDeadline(time.Unix(1, 0))
		close(done)
	})
	defer func() {
		if !stop() {
			<-done // its deadline lands before the next wait sets its own
		}
	}()
	var b [8]byte
	_, err = f.Read(b[:])
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return context.DeadlineExceeded
	}
	if err != nil {
		return fmt.Errorf("waiting on vector %d: %w", vector, err)
	}
	return nil
}

func (m *msix) close() error {
	var errs []error
	for _, f := range m.fds {
		errs = append(errs, f.Close())
	}
	m.fds = nil
	return errors.Join(errs...)
}
