package gate

import (
	"fmt"
	"github.com/sluice-gpu/sluice/api/abi"
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
				a := w.closedLoop(1, 100*time.Microsecond, think)
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

// gpuIdle is how long the GPU had nothing to run so far (the command
// running now counts as busy for what it ran).
func (w *world) gpuIdle() int64 {
	var busy int64
	for _, v := range w.vms {
		busy += v.busy
	}
	if len(w.queue) > 0 {
		busy += w.now - w.queue[0].start
	}
	return w.now - busy
}

// TestTurnsSleepyNotAnticipated: a VM of 100 µs kernels that sleeps 1 ms
// after each (a think time above ThinkCap) beside a VM that keeps 1 ms
// kernels queued: its drains pass the turn at once, and the GPU never
// idles for it (it would for a window at each drain if its sleeps were
// learned as think time).
func TestTurnsSleepyNotAnticipated(t *testing.T) {
	forHandoff(t, func(t *testing.T, handoff time.Duration) {
		w := newHandoffWorld(t, 5*time.Millisecond, handoff, false)
		a := w.closedLoop(1, 100*time.Microsecond, time.Millisecond)
		w.addVM(2, 1, time.Millisecond, 4, 0, time.Hour)
		w.g.SetBudget(ms(13))
		w.run(ms(1000))
		if len(a.ends) < 100 {
			t.Fatalf("the sleepy VM ran %d kernels", len(a.ends))
		}
		if idle := w.gpuIdle(); idle != 0 {
			t.Fatalf("the GPU idled %v beside a VM that always has work: a sleepy VM was anticipated", time.Duration(idle))
		}
	})
}

// TestTurnsAnticipationHostile: guests that game the anticipation.
//
//   - stops: thinks 5 µs after each of its 10 µs kernels, long enough to
//     be known, then stops: the GPU idles its think times and one window
//     (2 × 5 µs + ThinkSlackNs) after its last command, no more.
//   - bursts: three commands 5 µs apart, then a 2 ms sleep, over and over:
//     each sleep costs at most one window, and forgets the think time.
//   - slow: 10 µs kernels 300 µs apart (just under ThinkCap), beside two
//     VMs that keep 1 ms kernels queued: it thinks far longer than its
//     kernels run, so it is not anticipated (anticipated at every drain it
//     idled the GPU 97% of its turns, a third of the GPU's time, and the
//     other two got a third each): the GPU never idles for it and the
//     other two get nearly half each.
func TestTurnsAnticipationHostile(t *testing.T) {
	const kernel, think = 10 * time.Microsecond, 5 * time.Microsecond
	window := 2*int64(think) + ThinkSlackNs
	forHandoff(t, func(t *testing.T, handoff time.Duration) {
		t.Run("stops", func(t *testing.T) {
			runStopper(newHandoffWorld(t, 5*time.Millisecond, handoff, false), think)
		})
		t.Run("bursts", func(t *testing.T) {
			w := newHandoffWorld(t, 5*time.Millisecond, handoff, false)
			h := w.addVM(1, 1, kernel, 1, 0, time.Hour)
			n := 0
			h.thinks = func() int64 {
				n++
				if n%4 == 0 {
					return int64(2 * time.Millisecond)
				}
				return int64(think)
			}
			w.addVM(2, 1, time.Millisecond, 4, 0, time.Hour)
			w.g.SetBudget(ms(13))
			w.run(ms(1000))
			if n < 100 {
				t.Fatalf("the hostile VM ran %d kernels", n)
			}
			bound := int64(think)*int64(n) + window*int64(n/4+1)
			if idle := w.gpuIdle(); idle > bound {
				t.Fatalf("the GPU idled %v, want at most the hostile VM's short think times and one window per sleep (%v)",
					time.Duration(idle), time.Duration(bound))
			}
		})
		t.Run("slow", func(t *testing.T) {
			w := newHandoffWorld(t, 5*time.Millisecond, handoff, false)
			w.closedLoop(1, kernel, 300*time.Microsecond)
			b := w.addVM(2, 1, time.Millisecond, 4, 0, time.Hour)
			c := w.addVM(3, 1, time.Millisecond, 4, 0, time.Hour)
			w.g.SetBudget(ms(13))
			w.run(ms(3000))
			for _, v := range []*tvm{b, c} {
				if share := float64(v.busy) / float64(w.now); share < 0.48 {
					t.Errorf("vm %d got %.3f of the GPU's time beside the slow hostile VM, want nearly half (≥ 0.48)", v.id, share)
				}
			}
			if idle := float64(w.gpuIdle()) / float64(w.now); idle > 0.01 {
				t.Errorf("the GPU idled %.3f of the time beside VMs that always have work, want ≤ 0.01", idle)
			}
			if w.violations != 0 {
				t.Fatalf("%d overlapping submissions", w.violations)
			}
		})
	})
}

// TestTurnsDepthsMix: the H100's depths mix (seven VMs of 100 µs kernels
// keeping 1, 2, 4 … 64 in flight), with a GPU's latencies: a command
// reaches the GPU 10 µs after its Submit, its completion the channel 5 µs
// after it ends, and the depth-1 guest writes its next one 5 µs later.
// Passing the turn at its every drain gave the depth-1 VM 1.9% of the GPU
// (2% on the H100); anticipated for its think time, it gets its seventh
// less what it thinks and waits for its launches, the others theirs, and
// the GPU stays busy but for those waits.
func TestTurnsDepthsMix(t *testing.T) {
	const lat = 10_000
	w := newHandoffWorld(t, 5*time.Millisecond, DefaultHandoff, true)
	w.launch = lat
	w.deliver = func() int64 { return lat / 2 }
	var vs []*tvm
	for i, d := range []int{1, 2, 4, 8, 16, 32, 64} {
		v := w.addVM(uint32(i+1), 1, 100*time.Microsecond, d, 0, time.Hour)
		v.refill = lat / 2
		vs = append(vs, v)
	}
	w.g.SetBudget(ms(13))
	w.run(ms(2000))
	var total int64
	for _, v := range vs {
		total += v.busy
	}
	if busy := float64(total) / float64(w.now); busy < 0.96 {
		t.Errorf("GPU busy %.3f, want ≥ 0.96 (the depth-1 VM's waits are 20 µs of its 120 µs a command, a seventh of the time)", busy)
	}
	for _, v := range vs {
		share := float64(v.busy) / float64(total)
		if want := 1.0 / 7; share < want-0.01 || share > want+0.01 {
			t.Errorf("depth %d: share %.3f, want %.3f ± 0.01", v.depth, share, want)
		}
	}
}

// TestTurnsUnrungPutDoesNotStarve: a holder that learns a short think
// time, then, in each anticipation, writes its next command and advances
// its ring's put without ringing the doorbell, beside two VMs that keep
// 1 ms kernels queued, under turns and under auto. Its records are pending
// and nothing forwards them: the gate polls its channels for them, so
// pending alone keeps no turn, and the other two share the GPU (before,
// the holder kept the turn with nothing in flight and the others got
// nothing from 100 ms on).
func TestTurnsUnrungPutDoesNotStarve(t *testing.T) {
	for _, a := range []Arbitration{ArbitrationTurns, ArbitrationAuto} {
		t.Run(string(a), func(t *testing.T) {
			w := newWorld(t, a, 5*time.Millisecond)
			h := w.addVM(1, 1, 10*time.Microsecond, 1, 0, time.Hour)
			h.thinks = func() int64 {
				if w.now < ms(100) {
					return int64(5 * time.Microsecond)
				}
				w.at(w.now+int64(5*time.Microsecond), func() {
					rec := abi.EncodeCommand(abi.Command{Op: abi.OpThrottle, DurationNs: uint64(h.kernelNs)})
					h.region.CopyIn(h.layout.RecordOff(0, h.put), rec[:])
					h.put++
					h.region.Store32(h.layout.ChannelOff(0)+abi.ChPut, h.put) // and no doorbell
				})
				return int64(time.Hour)
			}
			b := w.addVM(2, 1, time.Millisecond, 4, time.Microsecond, time.Hour)
			c := w.addVM(3, 1, time.Millisecond, 4, time.Microsecond, time.Hour)
			w.g.SetBudget(ms(13))
			if a == ArbitrationAuto {
				for p := int64(1); p <= 40; p++ {
					w.at(p*ms(26), func() { w.g.EndPeriod(true) })
				}
			}
			w.run(ms(100))
			busyB, busyC := b.busy, c.busy
			w.run(ms(1000))
			for _, v := range []struct {
				id   uint32
				busy int64
			}{{2, b.busy - busyB}, {3, c.busy - busyC}} {
				if v.busy < ms(900*0.4) {
					t.Errorf("vm %d ran %v of the 900 ms after the holder stopped ringing, want ≥ 360ms", v.id, time.Duration(v.busy))
				}
			}
			if a == ArbitrationTurns && w.violations != 0 { // auto starts under the driver's
				t.Fatalf("%d overlapping submissions", w.violations)
			}
		})
	}
}

// TestAutoSlowThinkerConservesWork: under auto (the default), a VM of
// 10 µs kernels with 50-300 µs of think time between them beside two VMs
// that keep 1 ms kernels queued. Anticipated at each drain it idled 27-32%
// of the GPU; its idle is bounded by its busy time, so the GPU idles at
// most 2% and the other two get nearly half each.
func TestAutoSlowThinkerConservesWork(t *testing.T) {
	for _, think := range []time.Duration{50 * time.Microsecond, 150 * time.Microsecond, 300 * time.Microsecond} {
		t.Run(fmt.Sprintf("think=%v", think), func(t *testing.T) {
			w := newWorld(t, ArbitrationAuto, 5*time.Millisecond)
			h := w.closedLoop(1, 10*time.Microsecond, think)
			b := w.addVM(2, 1, time.Millisecond, 4, 0, time.Hour)
			c := w.addVM(3, 1, time.Millisecond, 4, 0, time.Hour)
			w.g.SetBudget(ms(13))
			for p := int64(1); p <= 120; p++ {
				w.at(p*ms(26), func() { w.g.EndPeriod(true) })
			}
			w.run(ms(3000))
			if a, _ := w.g.Arbitration(); a != ArbitrationTurns {
				t.Fatalf("auto put %s in force beside two backlogged VMs, want turns", a)
			}
			if idle := float64(w.gpuIdle()) / float64(w.now); idle > 0.02 {
				t.Errorf("the GPU idled %.3f of the time, want ≤ 0.02", idle)
			}
			for _, v := range []*tvm{b, c} {
				if share := float64(v.busy) / float64(w.now); share < 0.47 {
					t.Errorf("vm %d got %.3f of the GPU, want nearly half (≥ 0.47)", v.id, share)
				}
			}
			if len(h.ends) < 100 {
				t.Errorf("the slow thinker ran %d kernels", len(h.ends))
			}
		})
	}
}

// TestTurnsIdleChargedOnce: a depth-1 VM of 300 µs kernels thinking 200 µs
// beside one of 1 ms kernels, with a quantum (5.13 ms) that often ends
// while the depth-1 holder came back from an anticipation: that idle turn
// is charged once, so the charges add up to no more than the run's time,
// and the depth-1 VM's to no more than its busy time and all the GPU's
// idle (charged twice, it was 31 ms over in 3 s).
func TestTurnsIdleChargedOnce(t *testing.T) {
	w := newWorld(t, ArbitrationTurns, 5*time.Millisecond)
	log := &chargeLog{Picker: w.s, charged: map[uint32]int64{}}
	if err := w.g.SetTurns(ArbitrationTurns, TurnConfig{QuantumNs: ms(5.13), Picker: log, Clock: w.clock()}); err != nil {
		t.Fatal(err)
	}
	h := w.closedLoop(1, 300*time.Microsecond, 200*time.Microsecond)
	b := w.addVM(2, 1, time.Millisecond, 4, 0, time.Hour)
	w.g.SetBudget(ms(13))
	w.run(ms(3000))
	if total := log.charged[1] + log.charged[2]; total > w.now {
		t.Errorf("charged %v in a run of %v", time.Duration(total), time.Duration(w.now))
	}
	if idle := w.gpuIdle(); log.charged[1] > h.busy+idle {
		t.Errorf("the depth-1 VM was charged %v, more than its busy time %v and all the GPU's idle %v",
			time.Duration(log.charged[1]), time.Duration(h.busy), time.Duration(idle))
	}
	if b.busy == 0 || len(h.ends) < 100 {
		t.Fatalf("the VMs ran %v and %d kernels", time.Duration(b.busy), len(h.ends))
	}
}

// TestTurnsUncontendEndsAnticipation: an anticipating holder whose last
// waiting VM goes away is alone: its idle spell ends there, so that no
// stale anticipation, made for the VM that left, keeps the turn from a VM
// that comes later or is charged to the holder in a later contended turn.
func TestTurnsUncontendEndsAnticipation(t *testing.T) {
	w := newWorld(t, ArbitrationTurns, 5*time.Millisecond)
	w.closedLoop(1, 10*time.Microsecond, 5*time.Microsecond)
	w.addVM(2, 1, time.Millisecond, 4, 0, time.Hour)
	w.g.SetBudget(ms(13))
	for w.now < ms(100) && !(w.g.turns.idle && w.g.turns.holder == 1) {
		w.run(w.now + 1000)
	}
	if !w.g.turns.idle {
		t.Fatal("the depth-1 holder was never anticipated")
	}
	w.g.Remove(2)
	if tu := w.g.turns; tu.contended || tu.idle {
		t.Fatalf("alone, the holder's turn is contended %v, anticipating %v; want neither", tu.contended, tu.idle)
	}
}

// timerClock is the world's clock with a reusable timer (Clock.Timer), as
// a wall clock's: a reset replaces what was scheduled. fires counts the
// runs of its timers' functions.
func (w *world) timerClock(fires *int) Clock {
	c := w.clock()
	c.Timer = func(fn func()) func(int64) {
		gen := 0
		return func(d int64) {
			gen++
			g := gen
			w.at(w.now+d, func() {
				if g == gen {
					*fires++
					fn()
				}
			})
		}
	}
	return c
}

// TestAnticipationTimerReused: a depth-1 VM of 10 µs kernels thinking
// 2 µs beside one of 1 ms kernels is anticipated at nearly every drain;
// with a clock of reusable timers the anticipation's timer is reset, not
// made, at each: it fires (on the wall clock, a goroutine) a few times in
// 100 ms instead of once a command (41 711 for 41 795 commands in 1 s),
// and it still ends the anticipation when the VM stops: the GPU idles its
// think times and one window, no more.
func TestAnticipationTimerReused(t *testing.T) {
	forHandoff(t, func(t *testing.T, handoff time.Duration) {
		w := newWorld(t, ArbitrationTurns, 5*time.Millisecond)
		fires, afters := 0, 0
		clk := w.timerClock(&fires)
		after := clk.After
		clk.After = func(d int64, fn func()) { afters++; after(d, fn) }
		w.handoff = int64(handoff)
		if err := w.g.SetTurns(ArbitrationTurns, TurnConfig{QuantumNs: ms(5), Picker: w.s, Clock: clk, HandoffNs: int64(handoff)}); err != nil {
			t.Fatal(err)
		}
		h := runStopper(w, 2*time.Microsecond)
		if fires > len(h.ends)/20 || afters > len(h.ends)/20 {
			t.Errorf("%d timer fires and %d timers made for %d commands of the anticipated VM, want at most one per 20",
				fires, afters, len(h.ends))
		}
	})
}

// runStopper runs, in w, a VM of 10 µs kernels that thinks think after
// each until 100 ms and then stops, beside one that keeps 1 ms kernels
// queued, for 300 ms: the GPU idles its think times and one anticipation
// window after its last command (2 × think + ThinkSlackNs), no more.
func runStopper(w *world, think time.Duration) *tvm {
	w.t.Helper()
	h := w.addVM(1, 1, 10*time.Microsecond, 1, 0, 100*time.Millisecond)
	h.refill = int64(think)
	w.addVM(2, 1, time.Millisecond, 4, 0, time.Hour)
	w.g.SetBudget(ms(13))
	w.run(ms(300))
	if len(h.ends) < 100 {
		w.t.Fatalf("the stopping VM ran %d kernels", len(h.ends))
	}
	bound := int64(think)*int64(len(h.ends)) + 2*int64(think) + ThinkSlackNs
	if idle := w.gpuIdle(); idle > bound {
		w.t.Fatalf("the GPU idled %v, want at most the stopping VM's think time × its %d commands and one window (%v)",
			time.Duration(idle), len(h.ends), time.Duration(bound))
	}
	return h
}
