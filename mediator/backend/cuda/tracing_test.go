package cuda

import (
	"math"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

// tracerRan sets VM vm's tracer words as a running tracer number n leaves
// them, with count ran.
func (tl *timeline) tracerRan(vm int, n, ran uint64) { tl.tracerWords(vm, n, n-1, ran) }

// tracerWords sets VM vm's tracer words: the last tracer started and the
// last ended, and the count.
func (tl *timeline) tracerWords(vm int, live, done, ran uint64) {
	v := tl.vms[vm]
	base := v.blk.chanBase(0)
	v.blk.store(base+offSentLive, live)
	v.blk.store(base+offSentDone, done)
	v.blk.store(base+offSentRan, ran)
}

// stepClock gives the backend a clock that moves only by hand, from start,
// and the switch overhead f; it returns the clock's time to move.
func (tl *timeline) stepClock(start int64, f float64) *int64 {
	now := start
	tl.b.clock = func() int64 { return now }
	tl.b.lastSweep = now
	tl.b.setSwitchOverhead(f)
	return &now
}

// TestTracedOverlapBilledByTheCounts: where two VMs ran at once and both
// had their tracers running, each is billed what its tracer counted (the
// time its context held the GPU), at most what it would have been alone,
// not half the interval each; a count that lands late (in a lump) is
// billed at the next sweeps at which the VM runs, and so is a count made
// while the VM ran at no sweep (its commands ran between sweeps: a tracer
// counts only while one of them runs); what the VMs
// were not billed of the time they ran is the switches' (SwitchOverhead).
// A VM whose tracer does not run has what the traced VMs left; with no
// tracer running (before tracing is on, at the first read, once they have
// ended) the split is even.
func TestTracedOverlapBilledByTheCounts(t *testing.T) {
	tl := newTimeline([]int{1, 1}, 2)
	now := tl.stepClock(1_000_000, 0)
	var ranA, ranB uint64
	sweep := func(da, db uint64) {
		*now += 1_000_000
		ranA, ranB = ranA+da, ranB+db
		tl.tracerRan(0, 1, ranA)
		tl.tracerRan(1, 1, ranB)
		tl.b.sweep(nil)
	}
	tl.mark(0, 0, 1, 0)
	tl.mark(1, 0, 1, 0)
	sweep(0, 0) // both start: tracing on
	if !tl.b.traceOn || tl.vms[0].blk.load(offTracing) != 1 || tl.vms[1].blk.load(offTracing) != 1 {
		t.Fatalf("two VMs ran at a sweep: tracing on %v, the blocks say %d %d", tl.b.traceOn,
			tl.vms[0].blk.load(offTracing), tl.vms[1].blk.load(offTracing))
	}
	a, b := tl.vms[0].chans[0].find(1), tl.vms[1].chans[0].find(1)
	step := func(da, db uint64) (float64, float64, int64) {
		a0, b0 := a.gpu, b.gpu
		s0, _ := tl.b.SwitchOverhead()
		sweep(da, db)
		s1, _ := tl.b.SwitchOverhead()
		return a.gpu - a0, b.gpu - b0, s1 - s0
	}
	if ga, gb, _ := step(0, 0); ga != gb || ga == 0 {
		t.Fatalf("the first read of the tracers: A %v, B %v, want an even split", ga, gb)
	}
	// A's context held the GPU 3/4 of the interval, B's 3/20.
	if ga, gb, sw := step(750_000, 150_000); !near(int64(ga), 750_000) || !near(int64(gb), 150_000) || !near(sw, 100_000) {
		t.Errorf("traced interval: A %v, B %v, overhead %d; want their counts 750000, 150000 and the rest, 100000", ga, gb, sw)
	}
	// A's count lands a round late, 10 µs past the interval: an
	// interval's worth now, the rest at the next sweep.
	if ga, gb, _ := step(1_010_000, 0); !near(int64(ga), 1_000_000) || gb != 0 {
		t.Errorf("a count 10 µs past its interval: A %v, B %v; want 1000000 (the interval), 0", ga, gb)
	}
	if ga, _, _ := step(0, 0); !near(int64(ga), 10_000) {
		t.Errorf("the rest of it at the next sweep: A %v, want 10000", ga)
	}
	// A count of two intervals at once is more than a tracer lags by
	// (countSlack): what its tracer could not have counted is not billed.
	if ga, _, _ := step(2_000_000, 0); !near(int64(ga), 1_000_000) {
		t.Errorf("a count of two intervals at once: A %v, want 1000000 (the interval)", ga)
	}
	if ga, _, _ := step(0, 0); !near(int64(ga), int64(tl.vms[0].countSlack())) {
		t.Errorf("what carried of it: A %v, want the slack, %.0f", ga, tl.vms[0].countSlack())
	}
	// A's first command ends and its second has not started at the next
	// two sweeps: what its tracer counts meanwhile (a command that ran
	// between the sweeps) is billed once A runs at a sweep again.
	tl.mark(0, 0, 1, 1)
	a2 := tl.vms[0].chans[0].find(2)
	sweep(0, 0)       // A ran at the sweep before, not at this one
	sweep(500_000, 0) // A runs at neither end
	tl.mark(0, 0, 2, 1)
	sweep(0, 0)
	sweep(0, 0)
	if !near(int64(a2.gpu), 500_000) {
		t.Errorf("A's second command, after a sweep between its commands: billed %v, want the 500000 A's tracer counted then", a2.gpu)
	}
	// B's tracer ended in the interval: its count up to its end is B's
	// (nothing more); then its VM's time is not known, A's is, and B has
	// what A left.
	v := tl.vms[1]
	ranA += 300_000
	a0, b0 := a2.gpu, b.gpu
	*now += 1_000_000
	tl.tracerRan(0, 1, ranA)
	v.blk.store(v.blk.chanBase(0)+offSentDone, 1)
	tl.b.sweep(nil)
	if ga, gb := a2.gpu-a0, b.gpu-b0; !near(int64(ga), 300_000) || gb != 0 {
		t.Errorf("B's tracer ended in the interval, counting nothing more: A %.0f, B %.0f, want 300000 and 0 (their counts)", ga, gb)
	}
	ranA += 300_000
	a0, b0 = a2.gpu, b.gpu
	*now += 1_000_000
	tl.tracerRan(0, 1, ranA)
	tl.b.sweep(nil)
	if ga, gb := a2.gpu-a0, b.gpu-b0; !near(int64(ga), 300_000) || !near(int64(gb), 700_000) {
		t.Errorf("with B's tracer ended: A %.0f, B %.0f, want 300000 (its count) and 700000 (the rest)", ga, gb)
	}
	// Neither tracer runs (A's count lands at its end's read): the split
	// is even again.
	tl.vms[0].blk.store(tl.vms[0].blk.chanBase(0)+offSentDone, 1)
	*now += 1_000_000
	tl.b.sweep(nil)
	a0, b0 = a2.gpu, b.gpu
	*now += 1_000_000
	tl.b.sweep(nil)
	if ga, gb := a2.gpu-a0, b.gpu-b0; !near(int64(ga), int64(gb)) || ga == 0 {
		t.Errorf("with both tracers ended: A %.0f, B %.0f, want an even split", ga, gb)
	}
}

// TestUntracedVMHasWhatTheSwitchesLeave: a VM that ran at the sweeps
// without its tracer counting beside a traced one is billed what the
// traced VM's count left less the switches' time (f of the time, not f of
// what is left): nothing where the count and the switches fill the
// interval (its context waits its next time slice), the rest where they
// do not. Once the tracers measured the overhead in fully traced
// intervals, their measure stands for the probe's f, where f is measured
// and not an operator's.
func TestUntracedVMHasWhatTheSwitchesLeave(t *testing.T) {
	tl := newTimeline([]int{1, 1}, 1)
	now := tl.stepClock(1_000_000, 0.1)
	tl.mark(0, 0, 1, 0)
	tl.mark(1, 0, 1, 0)
	a, b := tl.vms[0].chans[0].find(1), tl.vms[1].chans[0].find(1)
	var ranA, ranB uint64
	// stepBy sweeps dt on with A's tracer counting da, B's db (untraced:
	// B's tracer not live); it returns what A and B were billed. step
	// sweeps 1 ms on.
	stepBy := func(dt int64, da, db uint64, untraced bool) (float64, float64) {
		a0, b0 := a.gpu, b.gpu
		*now += dt
		ranA, ranB = ranA+da, ranB+db
		tl.tracerRan(0, 1, ranA)
		tl.tracerRan(1, 1, ranB)
		if untraced {
			v := tl.vms[1]
			v.blk.store(v.blk.chanBase(0)+offSentDone, 1)
		}
		tl.b.sweep(nil)
		return a.gpu - a0, b.gpu - b0
	}
	step := func(da, db uint64, untraced bool) (float64, float64) {
		return stepBy(1_000_000, da, db, untraced)
	}
	step(0, 0, true) // tracing on
	step(0, 0, true) // A's first read
	// B's context waits its time slice: A held 900 µs of the 1 ms, the
	// switches 100 µs.
	for i := range 5 {
		if ga, gb := step(900_000, 0, true); !near(int64(ga), 900_000) || gb > 2 {
			t.Fatalf("interval %d, B switched out: A %.0f, B %.0f; want 900000 and 0 (the rest is the switches')", i, ga, gb)
		}
	}
	// B runs half: A held 400 µs.
	if ga, gb := step(400_000, 0, true); !near(int64(ga), 400_000) || !near(int64(gb), 500_000) {
		t.Errorf("B running: A %.0f, B %.0f; want 400000 and 500000", ga, gb)
	}
	// The probe's f is an operator's: the tracers' measure does not stand
	// for it. The tracers measure in usual sweeps' intervals only.
	learn := func(da, db uint64) {
		for range 2 + overheadMinNs/10_000 {
			stepBy(10_000, da, db, false)
		}
	}
	learn(4_500, 4_300) // both traced: 1.2 µs of each 10 µs left

	if f := tl.b.overheadFraction(); f != 0.1 {
		t.Errorf("f set by an operator: the fraction is %g, want 0.1", f)
	}
	// Measured: after enough fully traced intervals, their 12% stands.
	tl.b.switchAuto = true
	learn(4_500, 4_300)
	if f := tl.b.overheadFraction(); f < 0.119 || f > 0.121 {
		t.Fatalf("measured overhead %g, want 0.12 (what the counts left)", f)
	}
	// A count that leaves nothing (forged, or a VM's own gaps), or too
	// much, moves the measure no further than the probe's f or twice it.
	learn(5_000, 5_000)
	if f := tl.b.overheadFraction(); f != 0.1 {
		t.Errorf("counts that leave nothing: measured overhead %g, want the probe's 0.1 at least", f)
	}
	learn(1_000, 1_000)
	if f := tl.b.overheadFraction(); f != 0.2 {
		t.Errorf("counts that leave 80%%: measured overhead %g, want twice the probe's, 0.2, at most", f)
	}
	f := tl.b.overheadFraction() // what B's share is taken less of
	step(450_000, 430_000, true) // B's tracer ends: this read is its last
	if ga, gb := step(400_000, 0, true); !near(int64(ga), 400_000) || !near(int64(gb), int64(600_000-f*1_000_000)) {
		t.Errorf("B running, overhead measured %.3f: A %.0f, B %.0f; want 400000 and %.0f", f, ga, gb, 600_000-f*1_000_000)
	}
}

// TestTracingComesOnWhenWorkWaitsBesideARunningVM: a VM whose command is
// issued and has not started while another VM's runs turns tracing on for
// both (its context takes the GPU at the driver's next time slice, and the
// running VM's tracer must start before that); work of one VM alone, or
// issued and ended, does not.
func TestTracingComesOnWhenWorkWaitsBesideARunningVM(t *testing.T) {
	tl := newTimeline([]int{1, 2}, 2)
	issued := func(vm, ch int, seq uint64) {
		c := tl.vms[vm].chans[ch]
		c.vm.blk.store(c.base+offIssued, seq)
	}
	tl.mark(0, 0, 1, 0)
	issued(0, 0, 2) // A's second queued behind its first: A alone
	tl.sweep()
	if tl.b.traceOn {
		t.Fatal("one VM's work alone turned tracing on")
	}
	issued(1, 1, 1) // B's first, on its second channel, ended already
	tl.mark(1, 1, 1, 1)
	tl.sweep()
	if tl.b.traceOn {
		t.Fatal("a VM's ended work beside a running VM turned tracing on")
	}
	issued(1, 1, 2) // B's second waits
	tl.sweep()
	if !tl.b.traceOn || tl.vms[0].blk.load(offTracing) != 1 || tl.vms[1].blk.load(offTracing) != 1 {
		t.Fatalf("B's work waiting beside A's running: tracing on %v, the blocks say %d %d; want on in both",
			tl.b.traceOn, tl.vms[0].blk.load(offTracing), tl.vms[1].blk.load(offTracing))
	}
}

// TestLoneVMBilledAloneWhileTracing: while tracing is on, an interval in
// which one VM ran and no other had work on the GPU or its tracer running
// is billed as a VM alone's (the interval), not by the VM's count, which
// lands in steps; with another VM's tracer running it is billed by the
// count. An interval that a late sweep made long is billed by the count
// all the same, and so is a VM's command that ended in one (the half of
// it at whose start the VM ran is a poor guess there).
func TestLoneVMBilledAloneWhileTracing(t *testing.T) {
	tl := newTimeline([]int{1, 1}, 1)
	now := tl.stepClock(1_000_000, 0)
	tl.mark(0, 0, 1, 0)
	tl.mark(1, 0, 1, 0)
	a := tl.vms[0].chans[0].find(1)
	var ranA, ranB uint64
	const dt = 10_000 // a usual sweep's interval
	step := func(dt int64, da, db uint64, bLive bool) float64 {
		a0 := a.gpu
		*now += dt
		ranA, ranB = ranA+da, ranB+db
		tl.tracerRan(0, 1, ranA)
		tl.tracerRan(1, 1, ranB)
		if !bLive {
			v := tl.vms[1]
			v.blk.store(v.blk.chanBase(0)+offSentDone, 1)
		}
		tl.b.sweep(nil)
		return a.gpu - a0
	}
	step(dt, 0, 0, true) // both run: tracing on
	step(dt, 0, 0, true) // the first reads
	tl.mark(1, 0, 1, 1)
	step(dt, 5_000, 5_000, true) // B's command ended in the interval: it ran at its start
	// B's tracer runs on (its last read): A's count, 6 of each 10 µs, bills it.
	if ga := step(dt, 6_000, 0, true); !near(int64(ga), 6_000) {
		t.Errorf("B's tracer running: A billed %.0f, want its count, 6000", ga)
	}
	step(dt, 6_000, 0, false) // B's tracer ended: B was there at the read before
	for i := range 3 {
		if ga := step(dt, 6_000, 0, false); !near(int64(ga), dt) {
			t.Errorf("interval %d with A alone: billed %.0f, want the interval, %d", i, ga, dt)
		}
	}
	if ga := step(1_000_000, 600_000, 0, false); !near(int64(ga), 600_000) {
		t.Errorf("a long interval with A alone: billed %.0f, want its count, 600000", ga)
	}
	// A's command ends in a long interval, its tracer 900 µs into it.
	tl.mark(0, 0, 1, 1)
	v := tl.vms[0]
	v.blk.store(v.blk.chanBase(0)+offSentRan, ranA+900_000)
	v.blk.store(v.blk.chanBase(0)+offSentDone, 1)
	a0 := a.gpu
	*now += 1_000_000
	var got int64 = -1
	for _, d := range tl.b.sweep(nil) {
		if d.vm == v {
			got = d.c.GPUNs
		}
	}
	if ga := got - int64(a0); got < 0 || !near(ga, 900_000) {
		t.Errorf("A's command ended 900 µs into a long interval: billed %d of it (delivered %v), want its count, 900000 (not the half)", ga, got >= 0)
	}
	if !tl.b.traceOn {
		t.Fatal("tracing went off: the test's intervals are within traceLinger")
	}
}

// TestCountLumpBilledAtTheStretchEnd: a count that runs a step behind
// and catches up in a lump past its interval carries the rest to the next
// interval at which its VM runs, and is billed there however that one is
// billed (here the last of the VM's command, its tracer ended): it is not
// let go with the end of the stretch.
func TestCountLumpBilledAtTheStretchEnd(t *testing.T) {
	for _, live := range []bool{false, true} {
		countLumpAtTheStretchEnd(t, live)
	}
}

// countLumpAtTheStretchEnd is TestCountLumpBilledAtTheStretchEnd with A's
// tracer ended at the read after its command's end, or still running
// (then A is billed its count there, the carry besides).
func countLumpAtTheStretchEnd(t *testing.T, live bool) {
	tl := newTimeline([]int{1, 1}, 1)
	now := tl.stepClock(1_000_000, 0)
	tl.mark(0, 0, 1, 0)
	tl.mark(1, 0, 1, 0)
	v := tl.vms[0]
	var ranA uint64
	var got int64 = -1
	step := func(da uint64, aLive bool) float64 {
		a := v.chans[0].find(1)
		a0 := a.gpu
		*now += 10_000
		ranA += da
		tl.tracerRan(0, 1, ranA)
		if !aLive {
			v.blk.store(v.blk.chanBase(0)+offSentDone, 1)
		}
		tl.tracerRan(1, 1, 0) // B's tracer runs: B is there
		for _, d := range tl.b.sweep(nil) {
			if d.vm == v {
				got = d.c.GPUNs
				return float64(got) - a0
			}
		}
		return a.gpu - a0
	}
	step(0, true) // both run: tracing on
	step(0, true) // the first reads
	tl.mark(1, 0, 1, 1)
	step(0, true) // B's command ended: A runs beside B's tracer
	if ga := step(8_000, true); !near(int64(ga), 8_000) {
		t.Fatalf("A's count 8 µs of a 10 µs interval: billed %.0f, want 8000", ga)
	}
	if ga := step(12_000, true); !near(int64(ga), 10_000) {
		t.Fatalf("A's count catching up, 12 µs in a 10 µs interval: billed %.0f, want 10000 (the rest carried)", ga)
	}
	tl.mark(0, 0, 1, 1) // A's command ends, and its tracer with it
	if !live {
		ga := step(0, false)
		if got < 0 {
			t.Fatal("A's command was not delivered")
		}
		if !near(int64(ga), 5_000+2_000) {
			t.Errorf("the last interval of A's command, its tracer ended: billed %.0f, want 7000 (the half at whose start it ran, and the 2000 carried)", ga)
		}
		return
	}
	ga := step(4_000, true)
	if got < 0 {
		t.Fatal("A's command was not delivered")
	}
	if !near(int64(ga), 4_000+2_000) {
		t.Errorf("the last interval of A's command, its tracer running: billed %.0f, want 6000 (its count, and the 2000 carried)", ga)
	}
}

// TestForgedCountBilledWithinBounds: a VM whose kernels write a huge count
// into its tracer's words is billed a bounded amount more (its own bill),
// the switches' time owed goes back by no more than the intervals' time,
// and the other VM's bills stay its count.
func TestForgedCountBilledWithinBounds(t *testing.T) {
	tl := newTimeline([]int{1, 1}, 1)
	now := tl.stepClock(1_000_000, 0.1)
	tl.mark(0, 0, 1, 0)
	tl.mark(1, 0, 1, 0)
	a, b := tl.vms[0].chans[0].find(1), tl.vms[1].chans[0].find(1)
	var ranB uint64
	step := func(ranA, db uint64) (float64, float64) {
		a0, b0 := a.gpu, b.gpu
		*now += 10_000
		ranB += db
		tl.tracerRan(0, 1, ranA)
		tl.tracerRan(1, 1, ranB)
		tl.b.sweep(nil)
		return a.gpu - a0, b.gpu - b0
	}
	step(0, 0) // tracing on
	step(0, 0) // the first reads
	for i := range 20 {
		ga, gb := step(1<<62, 4_000)
		if ga > 2*countOverHalfNs || !near(int64(gb), 4_000) {
			t.Fatalf("interval %d, A's count forged to 2^62: A billed %.0f (want at most %d), B %.0f (want its count, 4000)",
				i, ga, 2*countOverHalfNs, gb)
		}
	}
	// A's command ends: its busy stretch with it, where a carry is billed
	// in full.
	tl.mark(0, 0, 1, 1)
	a0 := a.gpu
	*now += 10_000
	tl.tracerRan(0, 1, 1<<62)
	var got int64 = -1
	for _, d := range tl.b.sweep(nil) {
		if d.vm == tl.vms[0] {
			got = d.c.GPUNs
		}
	}
	if ga := float64(got) - a0; got < 0 || ga > 2*countOverHalfNs {
		t.Errorf("A's command ended after its count was forged: billed %.0f at its end (delivered %v), want at most %d", ga, got >= 0, 2*countOverHalfNs)
	}
	if tl.b.switchOwed < -21*10_000 {
		t.Errorf("the switches' time owed went to %.0f ns", tl.b.switchOwed)
	}
	if f := tl.b.overheadFraction(); f != 0.1 {
		t.Errorf("the overhead fraction moved to %g", f)
	}
	// What the forged count was not billed is reported dropped, for
	// having no room (TracerDropped); B's honest count is billed whole.
	if d := tl.vms[0].dropped; d[dropRoom] < 1<<61 {
		t.Errorf("A's forged count: dropped %v (%v), want most of 2^62 for room", d, DropNames)
	}
	if d := tl.vms[1].dropped; d != [nDrops]float64{} {
		t.Errorf("B's honest count: dropped %v (%v), want none", d, DropNames)
	}
}

// TestStuckTracerNotBelieved: a VM that runs with its tracer live and its
// count never growing for traceStale is split evenly again, not billed
// nothing.
func TestStuckTracerNotBelieved(t *testing.T) {
	tl := newTimeline([]int{1, 1}, 1)
	now := tl.stepClock(1_000_000, 0)
	tl.mark(0, 0, 1, 0)
	tl.mark(1, 0, 1, 0)
	b := tl.vms[1].chans[0].find(1)
	var ranA uint64
	for range 2 + traceStale/10_000_000 {
		*now += 10_000_000
		ranA += 100
		tl.tracerRan(0, 1, ranA)
		tl.tracerRan(1, 1, 0) // live, never counting
		tl.b.sweep(nil)
	}
	b0 := b.gpu
	*now += 10_000_000
	tl.tracerRan(0, 1, ranA+100)
	tl.b.sweep(nil)
	if db := b.gpu - b0; db == 0 {
		t.Errorf("B, whose live tracer never counted for %d ns, billed nothing still", int64(traceStale))
	}
}

// TestTracingTurnsOffAfterTheLastOverlap: a sweep at which one VM ran
// leaves tracing on for traceLinger after the last at which two did, then
// turns it off in every VM's block.
func TestTracingTurnsOffAfterTheLastOverlap(t *testing.T) {
	tl := newTimeline([]int{1, 1}, 1)
	now := tl.stepClock(0, 0)
	tl.mark(0, 0, 1, 0)
	tl.mark(1, 0, 1, 0)
	*now = 1000
	tl.b.sweep(nil)
	if !tl.b.traceOn {
		t.Fatal("tracing off after two VMs ran at a sweep")
	}
	tl.mark(1, 0, 1, 1) // B ends; A runs on alone
	*now += 1000
	tl.b.sweep(nil)
	*now += traceLinger / 2
	tl.b.sweep(nil)
	if !tl.b.traceOn || tl.vms[1].blk.load(offTracing) != 1 {
		t.Fatal("tracing off before traceLinger passed")
	}
	*now += traceLinger
	tl.b.sweep(nil)
	if tl.b.traceOn || tl.vms[0].blk.load(offTracing) != 0 || tl.vms[1].blk.load(offTracing) != 0 {
		t.Errorf("tracing on %v (blocks %d %d) traceLinger after the last overlap", tl.b.traceOn,
			tl.vms[0].blk.load(offTracing), tl.vms[1].blk.load(offTracing))
	}
}

// tracerLaunches is how many tracers r's driver ran, and the number of the
// last.
func (r *rig) tracerLaunches() (n int, last uint64) {
	for _, l := range r.f.launched() {
		if l.name == tracerName {
			n++
			last = le.Uint64(l.args[32:])
		}
	}
	return n, last
}

// TestWorkerLaunchesATracerWhileTracing: with tracing off a worker launches
// no tracer; with it on, one after a command that runs on the SMs (not a
// NOP or a copy) when the last one it launched has started (the fake's
// end at once: one a command), and none while one waits to start, however
// many commands it issues meanwhile; each such command's offIssued is
// stored for the tracer to see.
func TestWorkerLaunchesATracerWhileTracing(t *testing.T) {
	r := newRig(t, nil)
	vm := r.attach(1, 2, make([]byte, 4096))
	nop := abi.Command{Op: abi.OpNop}
	thr := abi.Command{Op: abi.OpThrottle, DurationNs: 1000}
	for i := range 3 {
		r.submit(vm, i%2, thr, 0)
	}
	wait(t, r.done, 3)
	if n, _ := r.tracerLaunches(); n != 0 {
		t.Fatalf("%d tracers with tracing off", n)
	}
	vm.blk.store(offTracing, 1)
	for i := range 3 {
		r.submit(vm, i%2, nop, 0)
	}
	wait(t, r.done, 3)
	if n, _ := r.tracerLaunches(); n != 0 {
		t.Fatalf("%d tracers for NOPs", n)
	}
	for i := range 3 {
		r.submit(vm, i%2, thr, 0)
	}
	wait(t, r.done, 3)
	if n, last := r.tracerLaunches(); n != 3 || last != 3 {
		t.Fatalf("%d tracers, the last number %d; want 3, 3 (one a command: each ended before the next)", n, last)
	}
	if got := vm.blk.load(vm.blk.chanBase(0) + offIssued); got != 6 {
		t.Errorf("channel 0's offIssued %d, want 6 (its sixth command)", got)
	}
	r.f.setHold(true) // the next tracer does not start
	launches := r.f.counted("LaunchKernel")
	for i := range 4 {
		r.submit(vm, i%2, thr, 0)
	}
	r.settle(vm)
	if n := r.f.counted("LaunchKernel") - launches - 4; n != 1 {
		t.Errorf("%d tracers launched for 4 commands while the first waited to start, want 1", n)
	}
	r.f.setHold(false)
	r.f.release(100)
	wait(t, r.done, 4)
}

// TestForgedTracerWordsPileNothingUp: a VM's kernels that write the
// running tracer's number (offSentLive) as the worker's last, so that it
// launches one at every command, get two on its stream at most while it
// does not drain (a launch would block the worker once the stream is
// full).
func TestForgedTracerWordsPileNothingUp(t *testing.T) {
	r := newRig(t, nil)
	vm := r.attach(1, 1, make([]byte, 4096))
	vm.blk.store(offTracing, 1)
	thr := abi.Command{Op: abi.OpThrottle, DurationNs: 1000}
	r.f.setHold(true) // nothing runs: tracers stay queued
	launches := r.f.counted("LaunchKernel")
	for i := range 8 {
		// The forgery: the last tracer launched "runs".
		tracers := uint64(r.f.counted("LaunchKernel") - launches - i)
		vm.blk.store(vm.blk.chanBase(0)+offSentLive, tracers)
		r.submit(vm, 0, thr, 0)
		r.settle(vm)
	}
	if n := r.f.counted("LaunchKernel") - launches - 8; n != 2 {
		t.Errorf("%d tracers launched on a stream that never drained, want 2", n)
	}
	r.f.setHold(false)
	r.f.release(100)
	wait(t, r.done, 8)
}

// TestUnseenCommandBilledByItsCount: a sleepy VM's command that ran and
// ended inside one long interval (a late sweep), its tracer starting and
// ending in it too, is billed what its tracer counted at the VM's next
// command, however many short intervals come between: its count is kept,
// not cut to the short intervals' length (a completer descheduled for
// 0.25-2 ms billed VMs of 100 µs kernels beside a busy one 5-14% under on
// an H100).
func TestUnseenCommandBilledByItsCount(t *testing.T) {
	p := newTracedPair(3)
	p.step(10_000, 8_000, 2_000)
	p.tl.mark(1, 0, 1, 1) // B's first command ends, its tracer with it
	p.done[1] = 1
	p.step(10_000, 8_000, 2_000)
	bill0, count0 := p.billed(1), p.ran[1]
	// B's second command runs and ends inside a 500 µs interval, its
	// tracer (the second) starting and ending there, counting 100 µs.
	p.tl.mark(1, 0, 2, 2)
	p.live[1], p.done[1] = 2, 2
	p.step(500_000, 400_000, 100_000)
	for range 20 {
		p.step(2_000, 2_000, 0)
	}
	p.thirdOfB(10_000)
	if got, want := p.billed(1)-bill0, p.ran[1]-count0; math.Abs(got-float64(want)) > 2 {
		t.Errorf("B's commands after its first, one of them seen by no sweep: billed %.0f, want their count %d", got, want)
	}
}

// TestForgedCountAfterIdleBounded: a VM whose kernels raise its count
// while it has no command queued (between its busy stretches) is billed,
// at its next command, no more than its tracer could have counted while
// it had commands queued, and the slack of a round: the time it sat idle
// beside a busy VM is no room for a forged count (a bound by the time
// since its carry began billed a 20 µs command 50 ms).
func TestForgedCountAfterIdleBounded(t *testing.T) {
	p := newTracedPair(1)
	a := p.tl.vms[0]
	p.step(10_000, 5_000, 5_000)
	p.tl.mark(0, 0, 1, 1) // A's only command ends and is delivered: nothing queued
	p.step(10_000, 5_000, 5_000)
	if n := len(a.chans[0].q); n != 0 {
		t.Fatalf("A's command not delivered: %d queued", n)
	}
	bill0 := p.billed(0)
	// 50 ms idle beside B, its tracer's words forged to look running and
	// counting 1 ns now and then.
	for range 5_000 {
		p.step(10_000, 1, 10_000)
	}
	// Its next command, 20 µs, with its count forged up by 50 ms.
	ch := a.chans[0]
	ch.mu.Lock()
	ch.q = append(ch.q, item{seq: 2, w: &workerConn{}, op: abi.OpNop, submitAt: 1})
	ch.mu.Unlock()
	a.blk.store(a.blk.l.codeOff(0, 2)+codeStamp, 2)
	p.live[0] = 2
	p.tl.mark(0, 0, 2, 1)
	p.step(10_000, 50_000_000, 5_000)
	p.tl.mark(0, 0, 2, 2)
	p.step(10_000, 10_000, 5_000)
	p.step(10_000, 0, 5_000)
	if got, most := p.billed(0)-bill0, 20_000+2*a.countSlack(); got > most {
		t.Errorf("a 20 µs command after 50 ms idle, its count forged: billed %.0f, want at most %.0f", got, most)
	}
}

// TestUnseenCountDroppedWhereTheIntervalIsNotTraced: where the VM that ran
// at the ends of an interval is billed it by the trapezoid (its tracer is
// not running), the count of a VM whose command ran between the sweeps
// is not carried to its next command besides: the interval's time went to
// the VM that ran.
func TestUnseenCountDroppedWhereTheIntervalIsNotTraced(t *testing.T) {
	p := newTracedPair(3)
	p.tl.mark(1, 0, 1, 1) // B's first command ends, its tracer with it
	p.done[1] = 1
	p.step(10_000, 5_000, 5_000)
	bill0, count0 := p.billed(1), p.ran[1]
	// A's tracer ends (A runs on, untraced); B's second command and its
	// tracer run between the next two sweeps, counting 4 µs.
	p.done[0] = 1
	p.step(10_000, 0, 0)
	p.tl.mark(1, 0, 2, 2)
	p.live[1], p.done[1] = 2, 2
	p.step(10_000, 0, 4_000)
	p.thirdOfB(0)
	if got, want := p.billed(1)-bill0, float64(p.ran[1]-count0-4_000); math.Abs(got-want) > 2 {
		t.Errorf("B after a command that ran inside an interval A was billed whole: billed %.0f, want %.0f (its third command's count)", got, want)
	}
}

// tracedPair is two VMs of a channel each, their first commands running
// and their tracers counting, swept by hand (tracing on, the first reads
// made): live, done and ran are each VM's tracer words at the next step.
type tracedPair struct {
	tl              *timeline
	now             *int64
	live, done, ran [2]uint64
}

func newTracedPair(seqs uint64) *tracedPair {
	p := &tracedPair{tl: newTimeline([]int{1, 1}, seqs), live: [2]uint64{1, 1}}
	p.now = p.tl.stepClock(1_000_000, 0)
	p.tl.mark(0, 0, 1, 0)
	p.tl.mark(1, 0, 1, 0)
	p.step(10_000, 0, 0) // both run: tracing on
	p.step(10_000, 0, 0) // the first reads
	return p
}

// step moves the clock by dt and the counts by da and db, and sweeps.
func (p *tracedPair) step(dt int64, da, db uint64) {
	*p.now += dt
	p.ran[0] += da
	p.ran[1] += db
	for i := range 2 {
		p.tl.tracerWords(i, p.live[i], p.done[i], p.ran[i])
	}
	p.tl.b.sweep(nil)
}

// thirdOfB runs B's third command, seen running, and its third tracer,
// over two 20 µs intervals (past countOverHalfNs: billed by the counts
// where a tracer started or ended in them), counting 10 µs in each; A's
// count grows by da in each.
func (p *tracedPair) thirdOfB(da uint64) {
	p.tl.mark(1, 0, 3, 2)
	p.live[1] = 3
	p.step(20_000, da, 10_000)
	p.tl.mark(1, 0, 3, 3)
	p.done[1] = 3
	p.step(20_000, da, 10_000)
}

// billed is VM i's bill so far.
func (p *tracedPair) billed(i int) float64 {
	k := p.tl.vms[i].billKinds
	return k[0] + k[1] + k[2]
}
