package sched

import (
	"slices"
	"testing"
)

// TestLoadStartsAfresh: VMs that start on an idle GPU (at the start, and
// again after an idle spell) are scheduled from their first saturated
// period, not once the smoothed load has climbed from the idle periods'
// zero (about ten periods, in which the VM with the longer kernels took 90%
// of the GPU unheld). Their first period is partial.
func TestLoadStartsAfresh(t *testing.T) {
	s := newSched(t, Config{}, 1, 2)
	var n int64
	start := func(what string) {
		t.Helper()
		for range 10 {
			s.EndPeriod(period(n))
			n++
		}
		s.EndPeriod(period(n, busy(1, periodNs/2), busy(2, periodNs/20)))
		n++
		var d Decision
		first := n
		for ; n < first+20 && len(d.Hold) == 0; n++ {
			d = s.EndPeriod(period(n, busy(1, periodNs*9/10), busy(2, periodNs/10)))
		}
		if !d.Saturated || !slices.Equal(d.Hold, []uint32{1}) {
			t.Fatalf("%s: VM 1 taking 90%% of a saturated GPU for %d periods: saturated %v, held %v", what, n-first, d.Saturated, d.Hold)
		}
		if n-first > 2 {
			t.Errorf("%s: VM 1 held after %d saturated periods, want at most 2", what, n-first)
		}
	}
	start("at the start")
	start("after an idle spell")
}
