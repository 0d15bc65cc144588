package cuda

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

// throttleEndedUnstamped queues one THROTTLE on a timeline's channel whose
// end marker and record are there and whose code slot is not stamped yet
// (its worker stamps it after the launch call returns).
func throttleEndedUnstamped(t *testing.T) (*timeline, *channel) {
	t.Helper()
	tl := newTimeline([]int{1}, 1)
	ch := tl.vms[0].chans[0]
	ch.q[0].op = abi.OpThrottle
	blk := ch.vm.blk
	blk.store(blk.l.codeOff(0, 1)+codeStamp, 0)
	rec := ch.base + blk.l.slotOff(1)
	blk.store(rec+8, 1000)
	blk.store(rec+16, 11_000)
	blk.store(rec, 10_000)
	blk.store(rec+24, 1) // the kernel's record
	tl.mark(0, 0, 1, 1)  // it ran and ended
	return tl, ch
}

// TestThrottleWaitsForItsCode: a THROTTLE whose end is seen before its
// worker stamped its code is delivered once the code is there, with that
// code, not failed (abi.ErrDevice, a slot that names another command).
func TestThrottleWaitsForItsCode(t *testing.T) {
	for _, code := range []abi.ErrorCode{abi.OK, abi.ErrBadHandle} {
		tl, ch := throttleEndedUnstamped(t)
		for range 2 {
			if _, got := tl.sweep(); len(got) != 0 {
				t.Fatalf("delivered %+v before its code was stamped", got)
			}
		}
		off := ch.vm.blk.l.codeOff(0, 1)
		ch.vm.blk.store(off+codeValue, uint64(code))
		ch.vm.blk.store(off+codeStamp, 1)
		_, got := tl.sweep()
		if cs := got[1]; len(cs) != 1 || cs[0].Code != code {
			t.Fatalf("code %v: delivered %+v, want one with %v", code, cs, code)
		}
	}
}

// TestThrottleCodeNeverStamped: a THROTTLE whose code never comes fails
// with abi.ErrDevice: at once when its worker ended, else after
// recordWait.
func TestThrottleCodeNeverStamped(t *testing.T) {
	tl, ch := throttleEndedUnstamped(t)
	ch.q[0].w = &workerConn{finalEnd: []uint64{1}}
	ch.q[0].w.dead.Store(true)
	if _, got := tl.sweep(); len(got[1]) != 1 || got[1][0].Code != abi.ErrDevice {
		t.Fatalf("worker ended: delivered %+v, want abi.ErrDevice", got)
	}

	tl, ch = throttleEndedUnstamped(t)
	if _, got := tl.sweep(); len(got) != 0 {
		t.Fatalf("delivered %+v at once", got)
	}
	ch.q[0].endAt -= recordWait // seen that long ago
	if _, got := tl.sweep(); len(got[1]) != 1 || got[1][0].Code != abi.ErrDevice {
		t.Fatalf("after recordWait: delivered %+v, want abi.ErrDevice", got)
	}
}

// TestOnlyThrottleWaitsForItsCode: a command of another kind finds its
// code before its end marker; an unstamped slot fails it at once.
func TestOnlyThrottleWaitsForItsCode(t *testing.T) {
	tl, ch := throttleEndedUnstamped(t)
	ch.q[0].op = abi.OpNop
	if _, got := tl.sweep(); len(got[1]) != 1 || got[1][0].Code != abi.ErrDevice {
		t.Fatalf("delivered %+v, want abi.ErrDevice", got)
	}
}

// TestSweepReadsTheClockOnce: a sweep that finds a channel's command still
// running, its start already noted, reads the clock once (its own time),
// not again for the channel; one that finds a new start or an end reads it
// for the channel too.
func TestSweepReadsTheClockOnce(t *testing.T) {
	tl := newTimeline([]int{1}, 2)
	var reads int
	tl.b.clock = func() int64 { reads++; return int64(1000 * reads) }
	sweep := func() int {
		reads0 := reads
		tl.b.sweep(nil)
		return reads - reads0
	}
	tl.mark(0, 0, 1, 0) // command 1 starts
	if n := sweep(); n != 2 {
		t.Errorf("a sweep that saw a start read the clock %d times, want 2", n)
	}
	for range 3 {
		if n := sweep(); n != 1 {
			t.Errorf("a sweep of a command running on read the clock %d times, want 1", n)
		}
	}
	tl.mark(0, 0, 2, 1) // 1 ended, 2 runs
	if n := sweep(); n != 2 {
		t.Errorf("a sweep that saw an end and a start read the clock %d times, want 2", n)
	}
}
