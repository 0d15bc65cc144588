package sim

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

func TestWallThrottle(t *testing.T) {
	s := newSim(t, "wall", nil)
	var deliveredAt atomic.Int64
	r := newRecorder()
	r.next = func(c backend.Completion) {
		if c.Tag == 2 {
			deliveredAt.Store(s.Clock().Now())
		}
	}
	v, err := s.Attach(backend.VMSpec{ID: 1, Channels: 1, Complete: r.complete})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	before := s.Clock().Now()
	submit(t, v, 0, throttle(2*time1ms), 1)
	submit(t, v, 0, throttle(2*time1ms), 2)
	got := r.wait(t, 2)
	if elapsed := time.Since(start); elapsed < 4*time.Millisecond {
		t.Errorf("two 2 ms throttles completed after %v of real time", elapsed)
	}
	a, b := got[0], got[1]
	if a.Busy() != 2*time1ms || b.Busy() != 2*time1ms {
		t.Errorf("busy %d and %d, want exactly %d", a.Busy(), b.Busy(), 2*time1ms)
	}
	if a.Start < before || b.Start != a.End {
		t.Errorf("submitted at %d: %+v then %+v (queued command must start at the previous end)", before, a, b)
	}
	// Waited for through the recorder's note, sent before next runs.
	for deliveredAt.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if d := deliveredAt.Load(); d < b.End {
		t.Errorf("delivered at %d, before End %d", d, b.End)
	}
}

func TestWallStatusIsExact(t *testing.T) {
	s := newSim(t, "wall", nil)
	v, r := attach(t, s, 3, 1, nil)
	submit(t, v, 0, throttle(5*time1ms), 0)
	var st backend.Status
	s.ReadStatus(&st)
	got := r.all()
	// Either the status was read while the throttle ran, or (on a very slow
	// machine) after: the status must agree with the timeline either way.
	running := len(st.Running) == 1 && st.Running[0].ChannelRef == backend.ChannelRef{VM: 3} && len(st.Active) == 1
	if len(got) == 0 && !running {
		t.Errorf("mid-command status %+v", st)
	}
	c := r.wait(t, 1)[0]
	if (st.Time < c.End) != running {
		t.Errorf("status at %d says running=%v; command ran %d..%d", st.Time, running, c.Start, c.End)
	}
	s.ReadStatus(&st)
	if len(st.Running) != 0 || len(st.Active) != 0 || st.Time < c.End {
		t.Errorf("after completion: %+v", st)
	}
}

func TestWallAfter(t *testing.T) {
	s := newSim(t, "wall", nil)
	done := make(chan int64, 1)
	at := s.Clock().Now()
	s.After(time1ms, func() { done <- s.Clock().Now() })
	select {
	case now := <-done:
		if now < at+time1ms {
			t.Errorf("After(1ms) ran %d ns later", now-at)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("After never ran")
	}
}
