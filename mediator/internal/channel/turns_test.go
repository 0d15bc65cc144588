package channel

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

// TestBudgetDeadlineAndHook: a deadline admits a command while the work
// ahead of it ends before the deadline (at least one command), Wake forwards what waited once it is lifted,
// Drained comes with the completion that leaves nothing in flight (not
// before), Knocked with a doorbell on a held channel, and BusyNs adds up
// the completions' busy time.
func TestBudgetDeadlineAndHook(t *testing.T) {
	r := newVMRig(t, 10_000*us)
	var drained, knocked int
	r.b.SetHook(&BudgetHook{Drained: func() { drained++ }, Knocked: func() { knocked++ }})
	now := int64(0)
	r.b.SetDeadline(2_500*us, func() int64 { return now })
	k := abi.Command{Op: abi.OpThrottle, DurationNs: 1_000 * us}
	r.write(0, k, k, k, k)
	if n := r.inFlight(0); n != 3 {
		t.Fatalf("%d kernels of 1ms in flight with 2.5ms to the deadline, want 3 (the third starts at 2ms)", n)
	}
	now = 3_000 * us // past the deadline: one at a time
	r.complete(0)
	r.complete(0)
	if n := r.inFlight(0); n != 1 {
		t.Fatalf("%d in flight past the deadline, want 1 (one command always goes)", n)
	}
	if drained != 0 {
		t.Fatalf("drained %d times while a command was in flight", drained)
	}
	r.b.SetDeadline(0, nil)
	r.b.Wake()
	r.collect()
	if n := r.inFlight(0); n != 2 {
		t.Fatalf("%d in flight after lifting the deadline, want 2 (Wake forwards the one that waited)", n)
	}
	for r.complete(0) {
	}
	if drained != 1 {
		t.Fatalf("drained reported %d times, want once (the last completion)", drained)
	}
	if got := r.b.BusyNs(); got != 4_000*us {
		t.Fatalf("BusyNs %d, want 4 ms", got)
	}
	r.chans[1].SetHeld(true)
	r.write(1, k)
	if knocked != 1 || r.inFlight(1) != 0 {
		t.Fatalf("a doorbell on a held channel: knocked %d, %d forwarded", knocked, r.inFlight(1))
	}
	r.write(0, k)
	if knocked != 1 {
		t.Fatal("a doorbell on a released channel knocked")
	}
}

// TestBudgetLongest: Longest is the longest completed command, THROTTLE
// included, and loses 1/LongestFall of itself at each period's end.
func TestBudgetLongest(t *testing.T) {
	b := NewBudget(0)
	b.completed(3_200)
	b.completed(8_000)
	b.completed(5_000)
	if l := b.Longest(); l != 8_000 {
		t.Fatalf("longest %d, want 8000", l)
	}
	b.Roll()
	if l := b.Longest(); l != 7_500 {
		t.Fatalf("longest %d a period on, want 7500", l)
	}
	b.completed(7_600)
	b.Roll()
	if l := b.Longest(); l != 7_125 {
		t.Fatalf("longest %d, want 7125 (7600 less a 16th)", l)
	}
}

// TestBudgetEndBound: EndBound counts the work in flight from the last
// completion, or from a command forwarded onto nothing in flight, or from a
// NotBefore, whichever is latest; Progress comes with each completion while
// watched and not with the one that drains; without a clock there is none.
func TestBudgetEndBound(t *testing.T) {
	r := newVMRig(t, 10_000*us)
	var progress, drained int
	r.b.SetHook(&BudgetHook{Progress: func() { progress++ }, Drained: func() { drained++ }})
	k := abi.Command{Op: abi.OpThrottle, DurationNs: 1_000 * us}
	r.write(0, k)
	if e := r.b.EndBound(); e != 0 {
		t.Fatalf("EndBound %d without a clock", e)
	}
	for r.complete(0) {
	}
	drained = 0
	now := int64(100 * us)
	r.b.SetClock(func() int64 { return now })
	r.write(0, k, k, k)
	if e := r.b.EndBound(); e != 3_100*us {
		t.Fatalf("EndBound %d, want 3.1ms (three kernels forwarded at 0.1ms onto nothing)", e)
	}
	now = 1_200 * us
	r.complete(0) // the second kernel runs from 1.2ms at the latest
	if e := r.b.EndBound(); e != 3_200*us || progress != 0 {
		t.Fatalf("EndBound %d, progress %d: want 3.2ms and no Progress unwatched", e, progress)
	}
	r.b.NotBefore(1_500 * us)
	r.b.NotBefore(1_300 * us) // earlier: no change
	if e := r.b.EndBound(); e != 3_500*us {
		t.Fatalf("EndBound %d after NotBefore(1.5ms), want 3.5ms", e)
	}
	r.b.SetWatch(true)
	now = 2_000 * us
	r.complete(0)
	if e := r.b.EndBound(); e != 3_000*us || progress != 1 {
		t.Fatalf("EndBound %d, progress %d: want 3ms and one Progress", e, progress)
	}
	r.complete(0)
	if e := r.b.EndBound(); e != 0 || progress != 1 || drained != 1 {
		t.Fatalf("drained: EndBound %d, progress %d, drained %d; want 0, 1, 1", e, progress, drained)
	}
}

// TestBudgetStartsAndDrainedAt: Starts counts the forwards onto nothing in
// flight and tells the last one's time, DrainedAt the last completion that
// left nothing in flight, on the clock (0 without one): the gate's think
// time of a VM is from the one to the next of the other.
func TestBudgetStartsAndDrainedAt(t *testing.T) {
	r := newVMRig(t, 10_000*us)
	k := abi.Command{Op: abi.OpThrottle, DurationNs: 1_000 * us}
	r.write(0, k)
	if n, at := r.b.Starts(); n != 1 || at != 0 {
		t.Fatalf("Starts %d at %d without a clock, want 1 at 0", n, at)
	}
	for r.complete(0) {
	}
	now := int64(100 * us)
	r.b.SetClock(func() int64 { return now })
	r.write(0, k, k)
	now = 1_100 * us
	r.complete(0) // one left: no drain
	if n, at := r.b.Starts(); n != 2 || at != 100*us || r.b.DrainedAt() != 0 {
		t.Fatalf("Starts %d at %d, drained at %d: want 2 at 0.1ms, no drain yet", n, at, r.b.DrainedAt())
	}
	now = 2_100 * us
	r.complete(0)
	if d := r.b.DrainedAt(); d != 2_100*us {
		t.Fatalf("DrainedAt %d, want 2.1ms", d)
	}
	now = 2_130 * us
	r.write(0, k)
	if n, at := r.b.Starts(); n != 3 || at != 2_130*us {
		t.Fatalf("Starts %d at %d, want 3 at 2.13ms (30 µs after the drain)", n, at)
	}
}
