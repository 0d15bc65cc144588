package channel

import (
	"testing"
	"time"
)

func TestHistBuckets(t *testing.T) {
	for _, tc := range []struct {
		ns     int64
		bucket int
	}{
		{-5, 0}, {0, 0}, {1000, 0}, {1001, 1}, {2000, 1}, {2001, 2}, {4000, 2}, {4001, 3},
		{int64(time.Millisecond), 10}, {int64(time.Hour), HistBuckets - 1},
	} {
		var h Hist
		h.observe(tc.ns)
		if h.Counts[tc.bucket] != 1 || h.Count() != 1 {
			t.Errorf("%d ns: counts %v, want bucket %d", tc.ns, h.Counts, tc.bucket)
		}
		if b := tc.bucket; b < HistBuckets-1 && tc.ns > HistBoundNs(b) {
			t.Errorf("%d ns in bucket %d, whose bound is %d", tc.ns, b, HistBoundNs(b))
		}
	}
	var a, b Hist
	a.observe(3000)
	b.observe(5000)
	a.Add(b)
	if a.Count() != 2 || a.SumNs != 8000 {
		t.Errorf("added: %d latencies, sum %d; want 2, 8000", a.Count(), a.SumNs)
	}
}

// TestLatenciesCountTheHold: a record written and rung while its channel is
// held is dispatched only when released, and its dispatch latency (and
// turnaround) counts the hold from its doorbell.
func TestLatenciesCountTheHold(t *testing.T) {
	r := newRig(t)
	r.ch.SetHeld(true)
	r.write(throttle(1))
	r.ch.Poll()
	time.Sleep(20 * time.Millisecond)
	r.ch.SetHeld(false)
	r.ch.Poll()
	r.completeAll(0)
	s := r.ch.Snapshot()
	if s.Dispatch.Count() != 1 || s.Turnaround.Count() != 1 {
		t.Fatalf("dispatch %+v, turnaround %+v: want one record each", s.Dispatch, s.Turnaround)
	}
	if d := time.Duration(s.Dispatch.SumNs); d < 20*time.Millisecond || s.Turnaround.SumNs < s.Dispatch.SumNs {
		t.Errorf("dispatch %v after a 20 ms hold, turnaround %v", d, time.Duration(s.Turnaround.SumNs))
	}
	// A record rung after the hold waits from its own doorbell.
	r.write(throttle(1))
	r.ch.Poll()
	r.completeAll(0)
	if s := r.ch.Snapshot(); s.Dispatch.Count() != 2 || time.Duration(s.Dispatch.SumNs) > 40*time.Millisecond {
		t.Errorf("second record: dispatch %+v", s.Dispatch)
	}
}
