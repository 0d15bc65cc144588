package channel

import (
	"sync"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

// TestBudgetOccupancy: the time in flight is counted from the command
// forwarded onto nothing in flight to the completion that drains the VM,
// over both its channels, and nothing between; waiting adds to the
// outstanding time and not to the in-flight time; nothing is counted before
// Track or after Track(nil).
func TestBudgetOccupancy(t *testing.T) {
	r := newVMRig(t, 0)
	k := abi.Command{Op: abi.OpThrottle, DurationNs: 1_000 * us}
	r.write(0, k) // untracked
	now := int64(10 * us)
	r.b.Track(func() int64 { return now }) // counted from 10µs: a kernel is in flight
	now = 200 * us
	r.write(1, k) // a second channel: no new spell
	now = 1_000 * us
	r.complete(0)
	now = 1_500 * us
	r.complete(1) // drained at 1.5ms
	want := Occupancy{InFlightNs: 1_490 * us, OutstandingNs: 1_490 * us}
	if o := r.b.Occupancy(); o != want {
		t.Fatalf("occupancy %+v, want %+v", o, want)
	}
	now = 3_000 * us // idle 1.5ms: not counted
	r.b.SetWaiting(true)
	now = 3_400 * us
	r.b.SetWaiting(false)
	r.write(0, k)
	now = 3_600 * us // open spells count up to now
	want = Occupancy{InFlightNs: 1_690 * us, OutstandingNs: 2_090 * us}
	if o := r.b.Occupancy(); o != want {
		t.Fatalf("occupancy %+v with a spell open, want %+v", o, want)
	}
	r.b.SetWaiting(true) // waiting while in flight: one spell
	now = 4_000 * us
	r.complete(0)
	now = 4_500 * us
	want = Occupancy{InFlightNs: 2_090 * us, OutstandingNs: 2_990 * us}
	if o := r.b.Occupancy(); o != want {
		t.Fatalf("occupancy %+v waiting after the drain, want %+v", o, want)
	}
	r.b.Track(nil)
	now = 9_000 * us
	if o := r.b.Occupancy(); o != want {
		t.Fatalf("occupancy %+v after Track(nil), want %+v (closed at 4.5ms)", o, want)
	}
}

// TestBudgetOccupancyRace: forwards and completions on several goroutines
// never count more time in flight than the clock ran, and the count ends
// closed (run with -race).
func TestBudgetOccupancyRace(t *testing.T) {
	b := NewBudget(0)
	var mu sync.Mutex
	clock := int64(0)
	now := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		clock++
		return clock
	}
	b.Track(now)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				if b.reserve(ControlCostNs) {
					b.refund(ControlCostNs, 0)
				}
			}
		}()
	}
	wg.Wait()
	o := b.Occupancy()
	if o.InFlightNs <= 0 || o.InFlightNs > clock || o.OutstandingNs != o.InFlightNs {
		t.Fatalf("occupancy %+v over a clock of %d ticks", o, clock)
	}
	if b.InFlight() != 0 {
		t.Fatalf("%d in flight after every refund", b.InFlight())
	}
}
