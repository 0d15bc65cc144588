package gate

import (
	"fmt"
	"testing"
	"time"
)

// TestTurnsDepth1FairShare: a closed loop of depth one (one 100 µs kernel
// in flight, the next written think after each completion) beside a VM
// that keeps four 1 ms kernels queued. Passing the turn at each of its
// drains would give it one kernel per turn of the other's (a share of
// about 2%); the drained holder, behind and known to think briefly, keeps
// the idle turn for its think time and gets its half, less the think time
// it is charged.
func TestTurnsDepth1FairShare(t *testing.T) {
	forHandoff(t, func(t *testing.T, handoff time.Duration) {
		for _, think := range []time.Duration{0, 10 * time.Microsecond} {
			t.Run(fmt.Sprintf("think=%v", think), func(t *testing.T) {
				w := newHandoffWorld(t, 5*time.Millisecond, handoff, false)
				a := w.addVM(1, 1, 100*time.Microsecond, 1, 0, time.Hour)
				a.refill = int64(think)
				b := w.addVM(2, 1, time.Millisecond, 4, 0, time.Hour)
				w.g.SetBudget(ms(13))
				w.run(ms(2000))
				// a is charged its kernels and its think time: its half of
				// the turns' time holds 100/(100+think) of kernels.
				k := float64(a.kernelNs) / float64(a.kernelNs+int64(think))
				want := k / (1 + k)
				share := float64(a.busy) / float64(a.busy+b.busy)
				if share < want-0.02 || share > want+0.02 {
					t.Fatalf("the depth-1 VM's share %.3f beside 1 ms kernels, want %.3f ± 0.02", share, want)
				}
				if w.violations != 0 {
					t.Fatalf("%d overlapping submissions", w.violations)
				}
			})
		}
	})
}

// TestBusyNowCountsTheRunningCommand: under turns the holder's busy time
// now counts what its command in flight has run (one VM at a time on the
// GPU), never more than its estimate; a latched VM's is its completed
// busy time alone.
func TestBusyNowCountsTheRunningCommand(t *testing.T) {
	w := newWorld(t, ArbitrationTurns, 5*time.Millisecond)
	a := w.addVM(1, 1, 10*time.Millisecond, 1, 0, time.Hour)
	w.addVM(2, 1, 10*time.Millisecond, 1, time.Millisecond, time.Hour)
	w.run(ms(3))
	if got, _ := w.g.BusyNowNs(1); got != ms(3) {
		t.Fatalf("the holder's busy time now at 3 ms: %v, want 3ms (its first command's run so far)", time.Duration(got))
	}
	if got, _ := w.g.BusyNowNs(2); got != 0 {
		t.Fatalf("the latched VM's busy time now: %v, want 0", time.Duration(got))
	}
	w.run(ms(13))
	// a's first command ended at 10 ms and the turn passed to VM 2.
	if got, _ := w.g.BusyNowNs(1); got != a.busy || got != ms(10) {
		t.Fatalf("a's busy time now, latched: %v, want its completed 10ms", time.Duration(got))
	}
	if got, _ := w.g.BusyNowNs(2); got != ms(3) {
		t.Fatalf("VM 2's busy time now 3 ms into its command: %v, want 3ms", time.Duration(got))
	}
}
