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
