package qmp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

// retryInterval is how long DialRetry waits between attempts.
const retryInterval = 20 * time.Millisecond

// Dial connects to the QMP socket at path and negotiates capabilities. ctx
// bounds the connection and the handshake only. It fails at once if nothing
// listens on path; see DialRetry.
func Dial(ctx context.Context, path string) (*Monitor, error) {
	return dial(ctx, path, false)
}

// DialRetry is Dial for a QEMU that may still be starting: while the socket
// does not exist or refuses connections, it tries again every 20ms until ctx
// ends. Give ctx a deadline.
func DialRetry(ctx context.Context, path string) (*Monitor, error) {
	return dial(ctx, path, true)
}

func dial(ctx context.Context, path string, retry bool) (*Monitor, error) {
	conn, err := connect(ctx, path, retry)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", path, err)
	}
	m := newMonitor(conn)
	if err := m.handshake(ctx); err != nil {
		m.Close()
		return nil, fmt.Errorf("qmp handshake on %s: %w", path, err)
	}
	return m, nil
}

func connect(ctx context.Context, path string, retry bool) (net.Conn, error) {
	var d net.Dialer
	var last error // the last retryable failure
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return c, nil
		}
		if retry && (ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)) {
			// The deadline cut this attempt short ("i/o timeout"): what
			// kept failing is the attempt before, if one ended (on a
			// loaded host the first can start past the deadline). The
			// dial's own timer can fire before the context's: then
			// ctx.Err() is nil still, and the cause is its deadline.
			return nil, fmt.Errorf("%w (last attempt: %w)", cmp.Or(ctx.Err(), context.DeadlineExceeded), cmp.Or(last, err))
		}
		if !retry || !retryable(err) {
			return nil, err
		}
		last = err
		t := time.NewTimer(retryInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// retryable reports whether a dial error may go away once QEMU is up.
func retryable(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EAGAIN) // listen backlog full
}

// handshake waits for the greeting and leaves capabilities negotiation mode.
func (m *Monitor) handshake(ctx context.Context) error {
	select {
	case <-m.greeted:
	case <-m.done:
		return fmt.Errorf("waiting for greeting: %w", m.Err())
	case <-ctx.Done():
		return fmt.Errorf("waiting for greeting: %w", ctx.Err())
	}
	if err := m.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		return err
	}
	m.mu.Lock()
	m.handshaking = false
	m.mu.Unlock()
	return nil
}
