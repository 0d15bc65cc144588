package cuda

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// timeline is a Backend without workers whose channels' markers a test
// writes between sweeps: a synthetic marker timeline for the completer.
type timeline struct {
	b   *Backend
	vms []*cudaVM
}

// newTimeline attaches one VM per entry of chans, with that many channels,
// each with seqs commands queued (all of them OK).
func newTimeline(chans []int, seqs uint64) *timeline {
	b := &Backend{epoch: time.Now()}
	tl := &timeline{b: b}
	var list []*channel
	w := &workerConn{}
	for i, n := range chans {
		l := newBlockLayout(n, 8, false)
		v := &cudaVM{b: b, id: uint32(i + 1), blk: newBlock(l, make([]byte, l.size))}
		for c := range n {
			ch := &channel{vm: v, idx: c, base: v.blk.chanBase(c)}
			for s := uint64(1); s <= seqs; s++ {
				ch.q = append(ch.q, item{seq: s, w: w, op: abi.OpNop, submitAt: 1})
				v.blk.store(l.codeOff(c, s)+codeStamp, s)
			}
			v.chans = append(v.chans, ch)
			list = append(list, ch)
		}
		tl.vms = append(tl.vms, v)
	}
	b.chans.Store(&list)
	b.lastSweep = b.now()
	return tl
}

func (tl *timeline) mark(vm, ch int, start, end uint64) {
	c := tl.vms[vm].chans[ch]
	c.vm.blk.store(c.base+offStart, start)
	c.vm.blk.store(c.base+offEnd, end)
}

// sweep sweeps once, after a pause so that its interval is not empty, and
// returns its time and each VM's completions.
func (tl *timeline) sweep() (int64, map[uint32][]backend.Completion) {
	time.Sleep(time.Millisecond)
	out := tl.b.sweep(nil)
	got := map[uint32][]backend.Completion{}
	for _, d := range out {
		got[d.vm.id] = append(got[d.vm.id], d.c)
	}
	return tl.b.lastSweep, got
}

func near(a, b int64) bool { return math.Abs(float64(a-b)) <= 2 }

// TestOverlapSplitBetweenVMs: each end of an interval stands for half of
// it, split between the VMs running at that end; a VM that starts running
// in an interval has a quarter of it beside one that ran throughout, and a
// command that ran and ended between two sweeps at which its VM ran
// nothing is credited nothing (not the interval: the sweeps sample what
// runs). The bills add up to the time anything ran at a sweep's end.
func TestOverlapSplitBetweenVMs(t *testing.T) {
	tl := newTimeline([]int{1, 1, 1}, 1)
	t0 := tl.b.lastSweep
	tl.mark(0, 0, 1, 0) // A starts
	t1, got := tl.sweep()
	if len(got) != 0 || len(tl.b.running) != 1 {
		t.Fatalf("after A's start: deliveries %v, running %v", got, tl.b.running)
	}
	tl.mark(1, 0, 1, 0) // B starts
	tl.mark(2, 0, 1, 1) // C runs and ends between the sweeps
	t2, got := tl.sweep()
	cs := got[3]
	if len(cs) != 1 || cs[0].Busy() != 0 {
		t.Fatalf("C, unseen between two sweeps at which it ran nothing: %+v, want billed nothing", cs)
	}
	tl.mark(0, 0, 1, 1) // A ends
	t3, got := tl.sweep()
	as := got[1]
	d0, d1, d2 := t1-t0, t2-t1, t3-t2
	if want := d0/2 + d1/2 + d1/4 + d2/4; len(as) != 1 || !near(as[0].GPUNs, want) {
		t.Fatalf("A: %+v, want GPUNs %d (the second half of the interval it started in, then all the first half, half the second, a quarter of the next)", as, want)
	}
	tl.mark(1, 0, 1, 1) // B ends
	t4, got := tl.sweep()
	bs := got[2]
	d3 := t4 - t3
	if want := d1/4 + d2/4 + d2/2 + d3/2; len(bs) != 1 || !near(bs[0].GPUNs, want) {
		t.Fatalf("B: %+v, want GPUNs %d", bs, want)
	}
	if sum, want := as[0].Busy()+bs[0].Busy(), t4-t0-d0/2-d3/2; !near(sum, want) {
		t.Errorf("bills add up to %d, want %d", sum, want)
	}
}

// TestVMBilledTheUnionOfItsChannels: a VM's commands running at once on
// several channels count once (its streams run at once in its one
// context): its part of an interval's half is the same as a one-channel
// VM's, split between its channels running at that end, and a channel's
// credit is split between the commands that ran on it, an unseen one
// included.
func TestVMBilledTheUnionOfItsChannels(t *testing.T) {
	tl := newTimeline([]int{2, 1}, 2)
	t0 := tl.b.lastSweep
	tl.mark(0, 0, 1, 0)
	tl.mark(0, 1, 1, 0)
	tl.mark(1, 0, 1, 0)
	t1, _ := tl.sweep()
	d0 := t1 - t0
	// Channel 0 of A ends 1 and runs 2 to its end unseen; channel 1 of A
	// and B run on.
	tl.mark(0, 0, 2, 2)
	t2, got := tl.sweep()
	dt := t2 - t1
	as := got[1]
	if len(as) != 2 || len(got[2]) != 0 {
		t.Fatalf("deliveries %+v, want A's two of channel 0", got)
	}
	// The interval they started in: its second half, A and B a quarter of
	// it each, A's channels an eighth each (seq 1 of channel 0 has its
	// eighth, seq 2 nothing). The next: its first half likewise, channel
	// 0's eighth split between its two commands; its second half, A's
	// quarter all channel 1's, B's quarter.
	if len(as) == 2 {
		if !near(as[0].GPUNs, d0/8+dt/16) || !near(as[1].GPUNs, dt/16) {
			t.Errorf("A channel 0: GPUNs %d and %d, want %d and %d", as[0].GPUNs, as[1].GPUNs, d0/8+dt/16, dt/16)
		}
	}
	a1 := tl.vms[0].chans[1].find(1)
	b1 := tl.vms[1].chans[0].find(1)
	if want := d0/8 + dt/8 + dt/4; !near(int64(a1.gpu), want) || !near(int64(b1.gpu), d0/4+dt/2) {
		t.Errorf("credits A ch1 %v, B %v; want %d, %d", a1.gpu, b1.gpu, want, d0/4+dt/2)
	}
	if !near(int64(a1.ran), d0/4+dt/2) || !near(int64(b1.ran), d0/4+dt/2) {
		t.Errorf("watchdog clocks A ch1 %v, B %v; want the VM share %d each", a1.ran, b1.ran, d0/4+dt/2)
	}
}

// TestStartSeenByAnotherReaderWaitsForTheNextSweep: a start that the
// status reader saw after the sweep read the markers is not this sweep's:
// it would be credited from the sweep's time, before it happened, while an
// end that landed at the same moment waits for the next sweep.
func TestStartSeenByAnotherReaderWaitsForTheNextSweep(t *testing.T) {
	tl := newTimeline([]int{1}, 1)
	ch := tl.vms[0].chans[0]
	ch.readMarkers()
	tl.b.unseen, tl.b.now1 = ch.peek(nil, nil)
	tl.mark(0, 0, 1, 0)
	var st backend.Status
	tl.b.ReadStatus(&st)
	if len(st.Running) != 1 {
		t.Fatalf("status %+v, want the channel running", st)
	}
	if _, seq := ch.sweep(nil); seq != 0 {
		t.Fatalf("the sweep reports seq %d running from markers read before its start", seq)
	}
	ch.readMarkers()
	ch.peek(nil, nil)
	if _, seq := ch.sweep(nil); seq != 1 {
		t.Fatalf("the next sweep reports %d running, want 1", seq)
	}
}

// TestIdleTimeIsNobodys: the interval of the first sweep after the
// completer rested (nothing outstanding, Backend.rest) starts at the rest,
// not at the sweep before the idle time, so a command running at that
// sweep is credited half of its interval from the rest, not half the idle
// time (on the H100 a 50 ms kernel submitted 150 ms after attach was billed
// 126 ms).
func TestIdleTimeIsNobodys(t *testing.T) {
	tl := newTimeline([]int{1}, 1)
	time.Sleep(20 * time.Millisecond) // idle: nothing outstanding
	rested := tl.b.now()
	tl.b.rest(rested)
	tl.mark(0, 0, 1, 0) // starts
	t1, _ := tl.sweep()
	tl.mark(0, 0, 1, 1) // ends
	t2, got := tl.sweep()
	cs := got[1]
	if want := (t1-rested)/2 + (t2-t1)/2; len(cs) != 1 || !near(cs[0].GPUNs, want) {
		t.Fatalf("%+v, want GPUNs %d (half of each interval it ran at one end of), not a part of the 20 ms idle", cs, want)
	}
}

// TestUnseenCreditedOnce: a command that ended unseen behind a THROTTLE
// still waiting for its code (so not delivered at that sweep) is credited
// in the interval it ran in, not again at every later sweep.
func TestUnseenCreditedOnce(t *testing.T) {
	tl := newTimeline([]int{1}, 3)
	ch := tl.vms[0].chans[0]
	ch.q[0].op = abi.OpThrottle // its code never comes (the completer waits while its worker lives)
	ch.vm.blk.store(ch.vm.blk.l.codeOff(0, 1)+codeStamp, 0)
	tl.mark(0, 0, 1, 0) // the THROTTLE runs
	tl.sweep()
	tl.mark(0, 0, 3, 2) // it ended, 2 ran and ended unseen, 3 runs
	tl.sweep()
	b1 := ch.find(2).gpu
	for range 3 {
		tl.sweep() // 3 alone runs throughout
	}
	if b2 := ch.find(2).gpu; b2 != b1 {
		t.Errorf("command 2, ended before these sweeps, was credited %.0f ns more", b2-b1)
	}
}
