package ivshmem

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// ClearVector drops the signals pending on the client's own eventfd for
// vector.
func (c *Client) ClearVector(vector int) error {
	fd := c.VectorFD(vector)
	if fd < 0 {
		return fmt.Errorf("clearing vector %d: %w", vector, ErrBadVector)
	}
	var b [8]byte
	_, _, err := drain(fd, &b)
	return err
}

// WaitVector blocks in poll(2) until another peer signals the client's own
// eventfd for vector, and consumes the signal; or until ctx ends, and then
// returns ctx's error. It may return nil early (a signal left from
// before): callers look at what they wait for and call again. Calls for
// different vectors may run at once; calls for one vector must not.
func (c *Client) WaitVector(ctx context.Context, vector int) error {
	fd := c.VectorFD(vector)
	if fd < 0 {
		return fmt.Errorf("waiting on vector %d: %w", vector, ErrBadVector)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	pfds := [2]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n := 1
	if ctx.Done() != nil {
		// A cancellation wakes the poll through an eventfd of the vector's
		// own, signalled by the context; it is drained before the next
		// wait.
		cfd, err := c.cancelFD(vector)
		if err != nil {
			return err
		}
		pfds[1] = unix.PollFd{Fd: int32(cfd), Events: unix.POLLIN}
		n = 2
		fired := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			_ = signal(cfd)
			close(fired)
		})
		defer func() {
			if !stop() {
				<-fired
				var b [8]byte
				_, _, _ = drain(cfd, &b)
			}
		}()
	}
	for {
		timeout := -1
		if dl, ok := ctx.Deadline(); ok {
			d := time.Until(dl)
			if d <= 0 {
				// The context's own timer may not have fired yet.
				return context.DeadlineExceeded
			}
			timeout = int((d + time.Millisecond - 1) / time.Millisecond)
		}
		ready, err := unix.Poll(pfds[:n], timeout)
		if err == unix.EINTR || (err == nil && ready == 0) {
			continue // the Go runtime's preemption signals; a timeout: the deadline, above
		}
		if err != nil {
			return fmt.Errorf("waiting on vector %d: %w", vector, err)
		}
		break
	}
	var b [8]byte
	if _, _, err := drain(fd, &b); err != nil {
		return err
	}
	return ctx.Err()
}

// cancelFD is vector's cancellation eventfd, made on first use.
func (c *Client) cancelFD(vector int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return -1, ErrClosed
	}
	if c.cancel == nil {
		c.cancel = make([]int, len(c.own))
		for i := range c.cancel {
			c.cancel[i] = -1
		}
	}
	if c.cancel[vector] < 0 {
		fd, err := newEventfd()
		if err != nil {
			return -1, err
		}
		c.cancel[vector] = fd
	}
	return c.cancel[vector], nil
}
