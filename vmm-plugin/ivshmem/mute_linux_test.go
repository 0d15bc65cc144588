package ivshmem

import (
	"sync/atomic"
	"testing"
	"time"
)

// A guest ringing far over the limit is muted: the server reads its
// doorbells a bounded number of times, and every signal still arrives
// (counted in the reads' counts), those taken while muted in Limited.
func TestStormMuted(t *testing.T) {
	const limit = 1000
	var reads, signals, mutes atomic.Uint64
	srv, _, events := testServer(t, ServerConfig{Vectors: 2, DoorbellLimit: limit,
		OnDoorbell: func(_ int, n uint64) { reads.Add(1); signals.Add(n) },
		OnLimit:    func(int) { mutes.Add(1) },
	})
	c := mustDial(t, srv.cfg.SocketPath, 2)
	recvPeerEvent(t, events)
	const rings = 100_000
	start := time.Now()
	for range rings {
		if err := c.Notify(0, 0); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every signal read", func() bool { return signals.Load() == rings })
	el := time.Since(start)
	if mutes.Load() == 0 || srv.Limited() == 0 {
		t.Fatalf("%d signals in %v at a limit of %d/s: %d mutes, %d limited", rings, el, limit, mutes.Load(), srv.Limited())
	}
	// The burst, the rate, and one read per mute ending.
	bound := 64 + uint64(el.Seconds()*limit) + uint64(el/MuteFor) + 2
	if r := reads.Load(); r > bound {
		t.Errorf("%d reads in %v, want at most %d (limit %d/s)", r, el, bound, limit)
	}
	t.Logf("%d signals in %v: %d reads, %d mutes, %d limited", rings, el, reads.Load(), mutes.Load(), srv.Limited())

	// The storm over, a doorbell is read at once.
	time.Sleep(3 * MuteFor)
	before := reads.Load()
	if err := c.Notify(0, 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a doorbell after the storm", func() bool { return reads.Load() > before })
}

// OnIdle keeps the epoll goroutine polling while it says so, without a
// doorbell, and stops being called once it says no until the next one.
func TestOnIdleSpins(t *testing.T) {
	var calls, bells atomic.Int64
	const spins = 500
	srv, _, events := testServer(t, ServerConfig{Vectors: 1,
		OnDoorbell: func(int, uint64) { bells.Add(1) },
		OnIdle:     func() bool { return calls.Add(1)%spins != 0 },
	})
	c := mustDial(t, srv.cfg.SocketPath, 1)
	recvPeerEvent(t, events)
	if err := c.Notify(0, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a spin of OnIdle calls", func() bool { return calls.Load() >= spins })
	time.Sleep(20 * time.Millisecond)
	if n := calls.Load(); n != spins || bells.Load() != 1 {
		t.Fatalf("OnIdle called %d times after one doorbell (%d read), want %d: it returned false at the last", n, bells.Load(), spins)
	}
}
