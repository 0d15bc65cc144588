package spin

import (
	"runtime"
	"testing"
	"time"
)

// A spinner yields at least every Period (plus a clock read's worth of
// looks): another goroutine on a single processor gets to run.
func TestIdleLetsOthersRun(t *testing.T) {
	for _, procs := range []int{1, 4} {
		prev := runtime.GOMAXPROCS(procs)
		y := New()
		ran := make(chan struct{})
		done := make(chan struct{})
		go func() { close(ran); <-done }()
		deadline := time.Now().Add(10 * time.Second)
		for {
			select {
			case <-ran:
			default:
				if time.Now().After(deadline) {
					runtime.GOMAXPROCS(prev)
					t.Fatalf("GOMAXPROCS %d: the other goroutine never ran", procs)
				}
				y.Idle()
				continue
			}
			break
		}
		close(done)
		runtime.GOMAXPROCS(prev)
	}
}

// On 4 processors or more, Idle yields about once a Period, not on every
// look.
func TestIdleYieldsByTime(t *testing.T) {
	y := &Yielder{start: time.Now()}
	looks := 0
	for t0 := time.Now(); time.Since(t0) < Period/2; looks++ {
		y.Idle()
	}
	if y.last != 0 {
		t.Fatalf("yielded within half a period (after %d looks)", looks)
	}
	for t0 := time.Now(); time.Since(t0) < 2*Period; {
		y.Idle()
	}
	if y.last == 0 {
		t.Fatal("no yield in two periods")
	}
}

// Restart makes the next yield due a Period from the new start, whatever
// the Yielder did before.
func TestRestart(t *testing.T) {
	y := &Yielder{start: time.Now().Add(-time.Hour), last: time.Minute}
	y.Restart(time.Now())
	for t0 := time.Now(); time.Since(t0) < Period/2; {
		y.Idle()
	}
	if y.last != 0 {
		t.Fatal("yielded within half a period of the restart")
	}
	for t0 := time.Now(); time.Since(t0) < 2*Period; {
		y.Idle()
	}
	if y.last == 0 {
		t.Fatal("no yield in two periods after the restart")
	}
}

// NewEvery's period replaces Period on 4 processors or more.
func TestNewEvery(t *testing.T) {
	y := NewEvery(time.Hour)
	y.always = false // as on a host of 4 processors or more
	y.Restart(time.Now())
	for t0 := time.Now(); time.Since(t0) < 2*Period; {
		if y.Idle() {
			t.Fatal("yielded within two Periods of an hour's period")
		}
	}
}
