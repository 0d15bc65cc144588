package gate

import (
	"math/rand/v2"
	"testing"
	"time"
)

// autoPeriod is the scheduling period of the auto tests (the engine's is
// 26 ms or more).
const autoPeriod = 20 * time.Millisecond

// newAutoWorld is a world under arbitration auto whose periods end every
// autoPeriod (the engine's EndPeriod), starting in start (driver or
// turns), with cfg's auto tuning.
func newAutoWorld(t *testing.T, start Arbitration, cfg AutoConfig) *world {
	t.Helper()
	w := newWorld(t, start, 0)
	w.handoff = int64(DefaultHandoff)
	tc := TurnConfig{Picker: w.s, Clock: w.clock(), HandoffNs: int64(DefaultHandoff), Auto: cfg}
	if err := w.g.SetTurns(ArbitrationAuto, tc); err != nil {
		t.Fatal(err)
	}
	var tick func()
	tick = func() {
		w.g.EndPeriod(true)
		w.at(w.now+int64(autoPeriod), tick)
	}
	w.at(int64(autoPeriod), tick)
	return w
}

// closedLoop adds a VM whose guest keeps one kernel in its ring and writes
// the next sleep after each completion (a kernel, then a sleep).
func (w *world) closedLoop(id uint32, kernel, sleep time.Duration) *tvm {
	v := w.addVM(id, 1, kernel, 1, 0, time.Hour)
	v.refill = int64(sleep)
	return v
}

// outstandingShare is a VM's occupancy over the last d.
func (w *world) outstandingShare(id uint32, from int64) float64 {
	o, _ := w.g.Occupancy(id)
	return float64(o.OutstandingNs-from) / float64(w.now)
}

// TestAutoSaturatingEntersTurns: two VMs that always have work queued put
// turns in force at the first period's end, and from then on one VM at a
// time has work on the GPU and the shares are even; they stay in turns.
func TestAutoSaturatingEntersTurns(t *testing.T) {
	w := newAutoWorld(t, ArbitrationDriver, AutoConfig{})
	a := w.addVM(1, 1, time.Millisecond, 4, 0, time.Hour)
	b := w.addVM(2, 1, 300*time.Microsecond, 8, 0, time.Hour)
	w.run(ms(19))
	if s := w.g.Auto(); s.InForce != ArbitrationDriver || !s.On {
		t.Fatalf("before the first period's end: %+v, want driver under auto", s)
	}
	w.run(ms(20))
	if s := w.g.Auto(); s.InForce != ArbitrationTurns || s.Switches != 1 || s.Backlogged != 2 {
		t.Fatalf("after a period of two saturating VMs: %+v, want turns, one switch, two backlogged", s)
	}
	w.run(ms(40)) // the driver's queue runs out under the first turns
	w.violations = 0
	a0, b0 := a.busy, b.busy
	w.run(ms(1000))
	if w.violations != 0 {
		t.Fatalf("%d submissions beside another VM's work under turns", w.violations)
	}
	if share := float64(a.busy-a0) / float64(a.busy-a0+b.busy-b0); share < 0.49 || share > 0.51 {
		t.Fatalf("a's share under turns %.3f, want 0.5 ± 0.01", share)
	}
	if s := w.g.Auto(); s.InForce != ArbitrationTurns || s.Switches != 1 || s.Periods != 50 || s.TurnsPeriods != 49 {
		t.Fatalf("after 1 s: %+v, want turns since the first period (49 of 50) and no other switch", s)
	}
}

// TestAutoPolicySharesNothing: under a policy that shares nothing (the
// engine's EndPeriod(false): policy none or timeslice) auto leaves turns
// at the period's end, without waiting for the hysteresis, and does not
// enter them however backlogged the VMs are; back under one that shares,
// it enters them again.
func TestAutoPolicySharesNothing(t *testing.T) {
	w := newWorld(t, ArbitrationDriver, 0)
	if err := w.g.SetTurns(ArbitrationAuto, TurnConfig{Picker: w.s, Clock: w.clock()}); err != nil {
		t.Fatal(err)
	}
	w.addVM(1, 1, time.Millisecond, 4, 0, time.Hour)
	w.addVM(2, 1, 300*time.Microsecond, 8, 0, time.Hour)
	shares := true
	var tick func()
	tick = func() {
		w.g.EndPeriod(shares)
		w.at(w.now+int64(autoPeriod), tick)
	}
	w.at(int64(autoPeriod), tick)
	w.run(ms(30))
	if s := w.g.Auto(); s.InForce != ArbitrationTurns {
		t.Fatalf("two saturating VMs under a policy that shares: %+v, want turns", s)
	}
	shares = false
	w.run(ms(50))
	if s := w.g.Auto(); s.InForce != ArbitrationDriver || s.Switches != 2 {
		t.Fatalf("one period under a policy that shares nothing: %+v, want the driver at once (2 switches)", s)
	}
	w.run(ms(200))
	if s := w.g.Auto(); s.InForce != ArbitrationDriver || s.Switches != 2 || s.Backlogged != 2 {
		t.Fatalf("two backlogged VMs under a policy that shares nothing: %+v, want the driver throughout", s)
	}
	shares = true
	w.run(ms(230))
	if s := w.g.Auto(); s.InForce != ArbitrationTurns || s.Switches != 3 {
		t.Fatalf("back under a policy that shares: %+v, want turns again", s)
	}
}

// TestAutoOneSaturatingStaysDriver: a saturating VM beside one that sleeps
// 20 ms between its kernels is no reason for turns.
func TestAutoOneSaturatingStaysDriver(t *testing.T) {
	w := newAutoWorld(t, ArbitrationDriver, AutoConfig{})
	w.addVM(1, 1, time.Millisecond, 4, 0, time.Hour)
	w.closedLoop(2, time.Millisecond, 20*time.Millisecond)
	w.run(ms(1000))
	if s := w.g.Auto(); s.InForce != ArbitrationDriver || s.Switches != 0 || s.Backlogged != 1 {
		t.Fatalf("%+v, want driver throughout, one VM backlogged", s)
	}
}

// TestAutoClosedLoopsStayDriver: the mix of bench spec nooveruse (two VMs
// of 100 µs kernels and 400 µs sleeps, two of 1 ms kernels and 4 ms
// sleeps) stays in the driver's arbitration from driver, and goes back to
// it from turns after AutoLeave periods, although a short VM waits longer
// under turns (its outstanding share is higher there: the threshold is
// above both).
func TestAutoClosedLoopsStayDriver(t *testing.T) {
	for _, start := range []Arbitration{ArbitrationDriver, ArbitrationTurns} {
		t.Run(string(start), func(t *testing.T) {
			w := newAutoWorld(t, start, AutoConfig{})
			w.closedLoop(1, 100*time.Microsecond, 400*time.Microsecond)
			w.closedLoop(2, 100*time.Microsecond, 400*time.Microsecond)
			w.closedLoop(3, time.Millisecond, 4*time.Millisecond)
			w.closedLoop(4, time.Millisecond, 4*time.Millisecond)
			w.run(ms(39))
			if start == ArbitrationTurns {
				if s := w.g.Auto(); s.InForce != ArbitrationTurns {
					t.Fatalf("after one period from turns: %+v, want turns still (AutoLeave 2)", s)
				}
				if sh := w.outstandingShare(1, 0); sh >= DefaultAutoThreshold {
					t.Fatalf("a short VM outstanding %.2f of the time under turns: it would lock turns in", sh)
				}
			}
			w.run(ms(41))
			o1, _ := w.g.Occupancy(1)
			t1 := w.now
			w.run(ms(1000))
			want := uint64(0)
			if start == ArbitrationTurns {
				want = 1
			}
			if s := w.g.Auto(); s.InForce != ArbitrationDriver || s.Switches != want || s.Backlogged != 0 {
				t.Fatalf("%+v, want driver after %d switches, nobody backlogged", s, want)
			}
			o, _ := w.g.Occupancy(1)
			if sh := float64(o.OutstandingNs-o1.OutstandingNs) / float64(w.now-t1); sh < 0.2 || sh > 0.9 {
				t.Fatalf("a short VM outstanding %.2f of the time under the driver: want within (0.2, 0.9)", sh)
			}
		})
	}
}

// TestAutoHysteresis: turns come after Enter periods with two backlogged
// VMs and go after Leave periods without (defaults 1 and 2; here 2 and 3
// too).
func TestAutoHysteresis(t *testing.T) {
	for _, c := range []AutoConfig{{}, {Enter: 2, Leave: 3}} {
		enter, leave := c.withDefaults().Enter, c.withDefaults().Leave
		w := newAutoWorld(t, ArbitrationDriver, c)
		w.addVM(1, 1, time.Millisecond, 4, 0, 200*time.Millisecond)
		w.addVM(2, 1, time.Millisecond, 4, 0, 200*time.Millisecond)
		p := ms(autoPeriod.Seconds() * 1000)
		for i := int64(1); i <= 20; i++ {
			w.run(i*p - 1) // just before the i-th period's end: the arbitration of period i
			got := w.g.Auto().InForce
			want := ArbitrationDriver
			// Period i runs under turns when the periods before it
			// had two backlogged VMs (1 … enter) and, after the guests
			// stop in period 10, fewer than leave of them had not
			// (11 …, period 10 still had: two VMs outstanding 100%).
			if i > int64(enter) && i <= int64(10+leave) {
				want = ArbitrationTurns
			}
			if got != want {
				t.Fatalf("enter %d, leave %d: period %d ran under %s, want %s", enter, leave, i, got, want)
			}
		}
		if s := w.g.Auto(); s.Switches != 2 {
			t.Fatalf("enter %d, leave %d: %d switches, want 2", enter, leave, s.Switches)
		}
	}
}

// TestAutoSwitchUnderLoad: switching between driver, turns and auto at
// random moments while four VMs saturate the GPU, and auto's own switches
// at every period (Enter and Leave 1, the threshold flipping), lose no
// work: every kernel a guest wrote completes, and every VM keeps running.
func TestAutoSwitchUnderLoad(t *testing.T) {
	w := newWorld(t, ArbitrationDriver, time.Millisecond)
	w.handoff = 0 // the checker's count is meaningless across switches
	vs := []*tvm{
		w.addVM(1, 1, time.Millisecond, 4, 0, 2*time.Second),
		w.addVM(2, 1, 300*time.Microsecond, 8, 0, 2*time.Second),
		w.addVM(3, 1, 50*time.Microsecond, 2, 0, 2*time.Second),
		w.closedLoop(4, 200*time.Microsecond, 300*time.Microsecond),
	}
	vs[3].stop = int64(2 * time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, len(vs))
	for step := 0; w.now < ms(2000); step++ {
		w.run(w.now + rng.Int64N(ms(3)) + 1)
		cfg := TurnConfig{QuantumNs: ms(1), Picker: w.s, Clock: w.clock(), HandoffNs: int64(DefaultHandoff) * rng.Int64N(2),
			Auto: AutoConfig{Threshold: []float64{0.01, 1}[rng.IntN(2)], Enter: 1, Leave: 1}}
		switch rng.IntN(4) {
		case 0:
			w.g.EndPeriod(true)
		case 1:
			must(t, w.g.SetTurns(ArbitrationAuto, cfg))
		case 2:
			must(t, w.g.SetTurns(ArbitrationTurns, cfg))
		default:
			must(t, w.g.SetTurns(ArbitrationDriver, cfg))
		}
		if step%100 == 99 {
			for i, v := range vs {
				if len(v.ends) == counts[i] {
					t.Fatalf("vm %d completed nothing in 100 switches (at %v, %s)", v.id, time.Duration(w.now), w.g.Auto().InForce)
				}
				counts[i] = len(v.ends)
			}
		}
	}
	w.run(ms(3000)) // the guests stopped at 2 s: everything drains
	for _, v := range vs {
		if len(v.ends) != int(v.put) {
			t.Errorf("vm %d: %d kernels written, %d completed", v.id, v.put, len(v.ends))
		}
		if b := v.ch.Budget(); b.InFlight() != 0 {
			t.Errorf("vm %d: %d ns still in flight after the drain", v.id, b.InFlight())
		}
	}
	if len(w.queue) != 0 {
		t.Errorf("%d commands still on the GPU", len(w.queue))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestAutoLongCommandsStayDriver: two saturating VMs, one of commands far
// longer than the overrun grace, stay in the driver's arbitration where
// the GPU preempts (turns would time-slice beside them anyway), from the
// first period, before the first such command completed; and go to turns
// where it does not.
func TestAutoLongCommandsStayDriver(t *testing.T) {
	for _, preempts := range []bool{true, false} {
		w := newWorld(t, ArbitrationDriver, 0)
		tc := TurnConfig{Picker: w.s, Clock: w.clock(), QuantumNs: ms(1), Preempts: preempts}
		must(t, w.g.SetTurns(ArbitrationAuto, tc))
		// Its first kernel runs past the first period's end: the long
		// commands are known before any completed.
		w.addVM(1, 1, 30*time.Millisecond, 2, 0, time.Hour) // past 3 quanta of 1 ms
		w.addVM(2, 1, 100*time.Microsecond, 4, 0, time.Hour)
		for i := int64(1); i <= 10; i++ {
			w.run(i * ms(20))
			w.g.EndPeriod(true)
		}
		s := w.g.Auto()
		want, switches := ArbitrationDriver, uint64(0)
		if !preempts {
			want, switches = ArbitrationTurns, 1
		}
		if s.InForce != want || s.Long != preempts || s.Switches != switches {
			t.Fatalf("preempts %v: %+v, want %s after %d switches", preempts, s, want, switches)
		}
	}
}

// TestAutoWatchesTwoOrMore: auto counts the VMs' occupancy (and reads the
// clock at their starts and drains) only while two VMs or more are there;
// a VM alone, which auto leaves to the driver whatever it does, pays no
// clock reads for it.
func TestAutoWatchesTwoOrMore(t *testing.T) {
	w := newAutoWorld(t, ArbitrationDriver, AutoConfig{})
	w.addVM(1, 1, time.Millisecond, 4, 0, time.Hour)
	w.run(ms(10))
	if o, _ := w.g.Occupancy(1); o.OutstandingNs != 0 {
		t.Fatalf("a VM alone: occupancy %+v counted, want none", o)
	}
	from := w.now
	w.addVM(2, 1, time.Millisecond, 4, 0, time.Hour)
	w.run(ms(15))
	for id := range uint32(2) {
		if o, _ := w.g.Occupancy(id + 1); o.OutstandingNs < (w.now-from)*9/10 {
			t.Fatalf("VM %d beside another: occupancy %v in %v, want it counted", id+1, time.Duration(o.OutstandingNs), time.Duration(w.now-from))
		}
	}
	w.g.Remove(2)
	before, _ := w.g.Occupancy(1)
	w.run(ms(25))
	if o, _ := w.g.Occupancy(1); o != before {
		t.Fatalf("alone again: occupancy %+v, then %+v, want no more counted", before, o)
	}
}
