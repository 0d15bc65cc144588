package channel

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
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

// TestFailuresLoggedAtMostOnceASecond: a channel's failure is logged with
// its error and record; a guest failing and resetting in a loop gets one
// line a second, the next one counting the failures not logged.
func TestFailuresLoggedAtMostOnceASecond(t *testing.T) {
	r := newRig(t)
	var buf bytes.Buffer
	r.ch.SetLog(slog.New(slog.NewTextHandler(&buf, nil)))
	for i := uint32(1); i <= 5; i++ {
		r.writeRaw(abi.Record{}) // ErrBadOpcode
		r.ch.Poll()
		r.region.Store32(r.layout.ChannelOff(1)+abi.ChReset, i)
		r.ch.Poll()
		if r.host32(abi.ChResetAck) != i {
			t.Fatalf("reset %d not acknowledged", i)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `msg="channel failed" channel=1 error=`) ||
		!strings.Contains(lines[0], abi.ErrBadOpcode.String()) || !strings.Contains(lines[0], "record=0 not_logged_since=0") {
		t.Fatalf("log after 5 failures in a row:\n%s", buf.String())
	}
	r.ch.mu.Lock()
	r.ch.failLogged -= failLogEvery // a second later
	r.ch.mu.Unlock()
	r.writeRaw(abi.Record{})
	r.ch.Poll()
	if !strings.Contains(buf.String(), "record=5 not_logged_since=4") {
		t.Fatalf("the next line a second later:\n%s", buf.String())
	}
}
