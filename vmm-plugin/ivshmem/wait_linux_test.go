package ivshmem

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A peer can be signalled as soon as it has its handshake: a guest that
// sleeps on its first command's completion must get the host's signal
// (the server once added a peer to its set only after sending the
// handshake, and a Notify in between failed with ErrNoPeer).
func TestNotifyRightAfterHandshake(t *testing.T) {
	const vectors = 3
	// The admission goes on after the handshake; slowed down, a peer
	// missing from the set until then is missed by every Notify.
	testHookHandshakeSent = func() { time.Sleep(5 * time.Millisecond) }
	t.Cleanup(func() { testHookHandshakeSent = func() {} })
	srv, _, _ := testServer(t, ServerConfig{Vectors: vectors})
	for range 5 {
		c := mustDial(t, srv.cfg.SocketPath, vectors)
		if err := srv.Notify(c.ID(), 1); err != nil {
			t.Fatalf("Notify of peer %d right after its handshake: %v", c.ID(), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		err := c.WaitVector(ctx, 1)
		cancel()
		if err != nil {
			t.Fatalf("WaitVector: %v", err)
		}
		c.Close()
	}
}

// WaitVector consumes a signal, returns at a deadline or a cancellation,
// and a cancellation left behind does not wake the next wait.
func TestWaitVector(t *testing.T) {
	const vectors = 2
	srv, _, _ := testServer(t, ServerConfig{Vectors: vectors})
	c := mustDial(t, srv.cfg.SocketPath, vectors)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if err := srv.Notify(c.ID(), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitVector(ctx, 0); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	if err := c.WaitVector(short, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitVector with the signal consumed: %v, want the deadline", err)
	}
	cctx, cancelNow := context.WithCancel(ctx)
	time.AfterFunc(5*time.Millisecond, cancelNow)
	if err := c.WaitVector(cctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitVector cancelled: %v", err)
	}
	time.AfterFunc(20*time.Millisecond, func() { srv.Notify(c.ID(), 0) })
	t0 := time.Now()
	if err := c.WaitVector(ctx, 0); err != nil || time.Since(t0) < 10*time.Millisecond {
		t.Fatalf("WaitVector after a cancellation: %v after %v, want the signal at 20 ms", err, time.Since(t0))
	}
	if err := srv.Notify(c.ID(), 1); err != nil {
		t.Fatal(err)
	}
	if err := c.ClearVector(1); err != nil {
		t.Fatal(err)
	}
	short2, cancelShort2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort2()
	if err := c.WaitVector(short2, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitVector after ClearVector: %v, want the deadline", err)
	}
	if err := c.WaitVector(ctx, vectors); !errors.Is(err, ErrBadVector) {
		t.Fatalf("WaitVector on a vector out of range: %v", err)
	}
}
