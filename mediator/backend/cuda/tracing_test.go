package cuda

import (
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
)

// tracerRan sets VM vm's tracer words as a running tracer number n leaves
// them, with count ran.
func (tl *timeline) tracerRan(vm int, n, ran uint64) {
	v := tl.vms[vm]
	base := v.blk.chanBase(0)
	v.blk.store(base+offSentLive, n)
	v.blk.store(base+offSentDone, n-1)
	v.blk.store(base+offSentRan, ran)
}

// TestTracedOverlapBilledByTheCounts: where two VMs ran at once and both
// had their tracers running, each is billed its tracer's count over the
// interval, not half of it: a VM whose context held the GPU three times as
// long as the other's is billed three times as much, and what neither
// counted is the switches' (SwitchOverhead). Before tracing is on (and at
// the first interval after, whose counts have no earlier read) the split
// is even.
func TestTracedOverlapBilledByTheCounts(t *testing.T) {
	tl := newTimeline([]int{1, 1}, 1)
	tl.b.setSwitchOverhead(0)
	tl.mark(0, 0, 1, 0)
	tl.mark(1, 0, 1, 0)
	tl.tracerRan(0, 1, 0)
	tl.tracerRan(1, 1, 0)
	tl.sweep() // both start
	if !tl.b.traceOn || tl.vms[0].blk.load(offTracing) != 1 || tl.vms[1].blk.load(offTracing) != 1 {
		t.Fatalf("two VMs ran at a sweep: tracing on %v, the blocks say %d %d", tl.b.traceOn,
			tl.vms[0].blk.load(offTracing), tl.vms[1].blk.load(offTracing))
	}
	a, b := tl.vms[0].chans[0].find(1), tl.vms[1].chans[0].find(1)
	t1, _ := tl.sweep() // the first read: even
	a1, b1 := a.gpu, b.gpu
	if a1 != b1 {
		t.Fatalf("the first traced interval, with no earlier read: %v and %v, want an even split", a1, b1)
	}
	// Over the next interval A's context held the GPU 3/4 of the time and
	// B's 1/6 of it.
	time.Sleep(2 * time.Millisecond)
	dt := tl.b.now() - t1
	ra, rb := uint64(dt*3/4), uint64(dt/6)
	tl.tracerRan(0, 1, ra)
	tl.tracerRan(1, 1, rb)
	sw0, _ := tl.b.SwitchOverhead()
	tl.b.sweep(nil)
	ga, gb := a.gpu-a1, b.gpu-b1
	if !near(int64(ga), int64(ra)) || !near(int64(gb), int64(rb)) {
		t.Errorf("traced interval: billed A %.0f, B %.0f; want their counts %d, %d", ga, gb, ra, rb)
	}
	iv := tl.b.lastSweep - t1
	sw, _ := tl.b.SwitchOverhead()
	if got, want := sw-sw0, iv-int64(ra)-int64(rb); !near(got, want) {
		t.Errorf("switch overhead grew %d ns, want %d (the interval %d less both counts)", got, want, iv)
	}
	// A tracer that stopped (its VM's count no longer holds): even again.
	v := tl.vms[1]
	v.blk.store(v.blk.chanBase(0)+offSentDone, 1)
	a2, b2 := a.gpu, b.gpu
	tl.sweep()
	if da, db := a.gpu-a2, b.gpu-b2; !near(int64(da), int64(db)) {
		t.Errorf("with B's tracer ended: A %.0f, B %.0f, want an even split", da, db)
	}
}

// TestTracingTurnsOffAfterTheLastOverlap: a sweep at which one VM ran
// leaves tracing on for traceLinger after the last at which two did, then
// turns it off in every VM's block.
func TestTracingTurnsOffAfterTheLastOverlap(t *testing.T) {
	tl := newTimeline([]int{1, 1}, 1)
	var now int64
	tl.b.clock = func() int64 { return now }
	tl.b.lastSweep = 0
	tl.mark(0, 0, 1, 0)
	tl.mark(1, 0, 1, 0)
	now = 1000
	tl.b.sweep(nil)
	if !tl.b.traceOn {
		t.Fatal("tracing off after two VMs ran at a sweep")
	}
	tl.mark(1, 0, 1, 1) // B ends; A runs on alone
	now += 1000
	tl.b.sweep(nil)
	now += traceLinger / 2
	tl.b.sweep(nil)
	if !tl.b.traceOn || tl.vms[1].blk.load(offTracing) != 1 {
		t.Fatal("tracing off before traceLinger passed")
	}
	now += traceLinger
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
// no tracer; with it on, one before a command when the last one it
// launched has started (the fake's end at once: one a command), and none
// while one waits to start, however many commands it issues meanwhile;
// each command's offIssued is stored for the tracer to see.
func TestWorkerLaunchesATracerWhileTracing(t *testing.T) {
	r := newRig(t, nil)
	vm := r.attach(1, 2, make([]byte, 4096))
	nop := abi.Command{Op: abi.OpNop}
	for i := range 3 {
		r.submit(vm, i%2, nop, 0)
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
	if n, last := r.tracerLaunches(); n != 3 || last != 3 {
		t.Fatalf("%d tracers, the last number %d; want 3, 3 (one a command: each ended before the next)", n, last)
	}
	if got := vm.blk.load(vm.blk.chanBase(0) + offIssued); got != 4 {
		t.Errorf("channel 0's offIssued %d, want 4 (its fourth command)", got)
	}
	r.f.setHold(true) // the next tracer does not start
	for i := range 4 {
		r.submit(vm, i%2, nop, 0)
	}
	r.settle(vm)
	r.f.setHold(false)
	r.f.release(100)
	wait(t, r.done, 4)
	if n, last := r.tracerLaunches(); n != 4 || last != 4 {
		t.Errorf("%d tracers, the last number %d; want 4, 4 (none launched while one waited to start)", n, last)
	}
}
