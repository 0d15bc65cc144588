package bench

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

// TestOldestWaitOnTheRunsClock: the oldest kernel's wait is read on the
// clock its doorbell was stamped on (the run's time), not on the backend's,
// which on a real GPU is ahead of it by the setup's time (the H100 bench
// reported 0.5-0.9 s for kernels of a millisecond).
func TestOldestWaitOnTheRunsClock(t *testing.T) {
	now := int64(5_000_000)
	g := &guest{h: &host{layout: abi.Layout{RingEntries: 8}}, now: func() int64 { return now }}
	g.chans = []guestChan{{sent: make([]int64, 8)}, {sent: make([]int64, 8)}}
	if w := g.oldestWait(); w != 0 {
		t.Fatalf("nothing outstanding: waited %d", w)
	}
	// Channel 0: records 9 and 10 outstanding, sent at 4.9 and 4.95 ms;
	// channel 1: record 3, sent at 4.7 ms.
	g.chans[0].get, g.chans[0].put = 9, 11
	g.chans[0].sent[9%8], g.chans[0].sent[10%8] = 4_900_000, 4_950_000
	g.chans[1].get, g.chans[1].put = 3, 4
	g.chans[1].sent[3] = 4_700_000
	if w := g.oldestWait(); w != 300_000 {
		t.Fatalf("oldest wait %d ns, want 300000", w)
	}
}
