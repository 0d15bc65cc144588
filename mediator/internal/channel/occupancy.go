package channel

import (
	"sync"
	"sync/atomic"
)

// occupancy is the time a VM had work outstanding, on a clock the gate
// gives (Budget.Track): in flight (forwarded and not completed: the
// budget's InFlight above zero) and waiting (latched by the gate with
// records not forwarded, as the gate says: SetWaiting). It is accumulated
// exactly, at the transitions: InFlight's 0 → n (a command forwarded onto
// nothing in flight) and n → 0 (the completion that drains the VM), and
// the gate's waiting on and off; nothing is sampled. Arbitration auto
// (mediator/internal/engine) reads it at each scheduling period's end to
// tell the VMs that always had work from the ones that wait for nothing in
// between.
//
// The transitions are counted under mu, which only they take (a VM that
// keeps work in flight takes it at neither its forwards nor its
// completions). A drain racing with the next forward may be seen after it:
// the instant between them is then counted in flight.
type occupancy struct {
	on atomic.Bool // tracked: the transitions take mu

	mu      sync.Mutex
	now     func() int64
	waiting bool
	flying  spell // in flight
	busy    spell // in flight or waiting
}

// spell counts the time a condition held.
type spell struct {
	on   bool
	from int64 // when the open spell began
	ns   int64 // closed spells
}

// set moves the condition to on at t.
func (s *spell) set(on bool, t int64) {
	if on == s.on {
		return
	}
	if on {
		s.from = t
	} else {
		s.ns += max(t-s.from, 0)
	}
	s.on = on
}

// at is the time counted up to t, an open spell included.
func (s spell) at(t int64) int64 {
	if s.on {
		return s.ns + max(t-s.from, 0)
	}
	return s.ns
}

// Occupancy is the time, up to now, a VM had work outstanding since its
// budget was first tracked (Budget.Occupancy).
type Occupancy struct {
	InFlightNs    int64 // something forwarded and not completed
	OutstandingNs int64 // that, or records latched by the gate (SetWaiting)
}

// Track starts (now not nil) or stops counting the budget's occupancy on
// the clock now; the counts so far are kept. A VM with work in flight or
// waiting when it starts is counted from then.
func (b *Budget) Track(now func() int64) {
	o := &b.occ
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.now != nil {
		t := o.now()
		o.flying.set(false, t)
		o.busy.set(false, t)
	}
	o.now = now
	o.on.Store(now != nil)
	if now != nil {
		o.edgeLocked(b.queued.Load() > 0)
	}
}

// SetWaiting says whether the VM has records latched by the gate, not
// forwarded (counted as outstanding while tracked).
func (b *Budget) SetWaiting(on bool) {
	o := &b.occ
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waiting = on
	if o.now != nil {
		o.edgeLocked(b.queued.Load() > 0)
	}
}

// Occupancy returns the time counted so far, open spells up to now; zero
// if the budget was never tracked.
func (b *Budget) Occupancy() Occupancy {
	o := &b.occ
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.now == nil {
		return Occupancy{InFlightNs: o.flying.ns, OutstandingNs: o.busy.ns}
	}
	t := o.now()
	return Occupancy{InFlightNs: o.flying.at(t), OutstandingNs: o.busy.at(t)}
}

// transition is called after InFlight moved from or to zero, with t the
// budget's clock read for that move (stamp; 0 without a clock): the gate
// gives the budget and its tracking the same clock, so the edge is counted
// at t instead of reading the clock again, once more at every start and
// drain of a depth-1 loop.
func (b *Budget) transition(t int64) {
	o := &b.occ
	if !o.on.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.now != nil {
		o.edgeAtLocked(b.queued.Load() > 0, t) // the state now, whatever the order of the racers
	}
}

// edgeLocked moves the spells to the state flying (and waiting) now.
func (o *occupancy) edgeLocked(flying bool) { o.edgeAtLocked(flying, 0) }

// edgeAtLocked moves the spells to the state flying (and waiting) at t (0:
// now, on the tracked clock).
func (o *occupancy) edgeAtLocked(flying bool, t int64) {
	busy := flying || o.waiting
	if flying == o.flying.on && busy == o.busy.on {
		return
	}
	if t == 0 {
		t = o.now()
	}
	o.flying.set(flying, t)
	o.busy.set(busy, t)
}
