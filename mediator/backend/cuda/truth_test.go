package cuda

import (
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
)

func TestTruthIsTheUnionLessSwitchedOut(t *testing.T) {
	for _, c := range []struct {
		name  string
		ivals []truthIval
		want  int64
	}{
		{"none", nil, 0},
		{"one stream, apart", []truthIval{{0, 100, 100}, {150, 200, 50}, {300, 330, 30}}, 180},
		{"touching", []truthIval{{0, 100, 100}, {100, 200, 100}}, 200},
		{"two streams overlapping", []truthIval{{50, 150, 100}, {0, 100, 100}}, 150},
		{"one inside another", []truthIval{{0, 1000, 1000}, {10, 20, 10}, {500, 600, 100}}, 1000},
		// 10 ns of each alone at a fifth switched out, 90 together.
		{"switched out together", []truthIval{{0, 100, 80}, {10, 110, 80}}, 88},
		{"the same interval", []truthIval{{0, 100, 60}, {0, 100, 60}, {0, 100, 60}}, 60},
		{"a kernel switched out alone", []truthIval{{0, 100, 70}, {200, 260, 60}}, 130},
		{"segments after a long one", []truthIval{{0, 500, 500}, {100, 200, 100}, {600, 700, 100}, {650, 800, 150}}, 700},
	} {
		var l truthLog
		l.keep.Store(true)
		for _, v := range c.ivals {
			l.add(v.first, v.last, v.ran)
		}
		ns, n := l.total()
		if ns != c.want || n != int64(len(c.ivals)) {
			t.Errorf("%s: %d ns over %d kernels, want %d over %d", c.name, ns, n, c.want, len(c.ivals))
		}
	}
}

// TestTruthOfStreamsSwitchedOutTogether: a VM on four streams of kernels
// back to back, staggered, under time slicing (its context in for 100 ns
// of every 300): its truth is the time its context was in while a kernel
// ran, not the union less one kernel's switched-out time, which counted
// nearly every slice it was out for (the H100's mixed-dfq-driver: truths
// adding up to 117-135% of the wall time).
func TestTruthOfStreamsSwitchedOutTogether(t *testing.T) {
	in := func(a, b int64) (n int64) { // the context's time in within [a, b)
		for x := a; x < b; x++ {
			if (x/100)%3 == 0 {
				n++
			}
		}
		return n
	}
	var l truthLog
	l.keep.Store(true)
	var end int64
	for c := range int64(4) {
		for f := 37 * c; f+400 <= 12_000; f += 400 {
			l.add(f, f+400, in(f, f+400))
			end = max(end, f+400)
		}
	}
	want := in(0, end)
	ns, _ := l.total()
	if d := float64(ns)/float64(want) - 1; d < -0.05 || d > 0.05 {
		t.Fatalf("truth %d ns, want %d (the context's time in): %+.1f%%", ns, want, 100*d)
	}
}

func TestTruthPastTheCapAddsOwnTime(t *testing.T) {
	var l truthLog
	l.keep.Store(true)
	l.ivals = make([]truthIval, maxTruthKernels)
	l.add(0, 100, 40)
	l.add(0, 100, 60)
	ns, n := l.total()
	if ns != 100 || n != maxTruthKernels+2 {
		t.Fatalf("%d ns over %d kernels, want 100 over %d", ns, n, maxTruthKernels+2)
	}
}

// TestCommandBehindALateRecordIsCredited: a THROTTLE that ended waits at
// the queue's head for its record while the stream runs the next command;
// that command is the channel's current one, seen starting and credited
// (before, only the head was, and the time it ran went to nobody).
func TestCommandBehindALateRecordIsCredited(t *testing.T) {
	mem := make([]byte, 4096)
	v := &cudaVM{blk: newBlock(blockLayout{size: len(mem)}, mem)}
	ch := &channel{vm: v, q: []item{{seq: 1}, {seq: 2}, {seq: 3}}}
	v.blk.store(offEnd, 1)   // 1 ended; its record is not there yet
	v.blk.store(offStart, 2) // 2 started
	it := ch.current()
	if it == nil || it.seq != 2 {
		t.Fatalf("current %+v, want seq 2", it)
	}
	ch.noteStart(it, 100)
	if ch.q[1].startAt != 100 || ch.startOf(&ch.q[1]) != 100 {
		t.Fatalf("seq 2 start %d, want 100", ch.q[1].startAt)
	}
	b := &Backend{running: []runRef{{ch, 2}}, now1: []runRef{{ch, 2}}}
	b.credit(50)
	if ch.q[0].gpu != 0 || ch.q[1].gpu != 50 || ch.q[1].ran != 50 {
		t.Fatalf("credits %v/%v, want 0/50", ch.q[0].gpu, ch.q[1].gpu)
	}
	v.blk.store(offEnd, 3)
	if it := ch.current(); it != nil {
		t.Fatalf("current %+v after every end", it)
	}
	if ch.find(2) != &ch.q[1] || ch.find(9) != nil {
		t.Fatal("find")
	}
}

// TestUnseenCommandCreditedNothingBilledNothing: a command that ran and
// ended between two sweeps at which its VM ran nothing is credited nothing
// (credit samples what runs at the sweeps) and billed nothing: not its span
// since it was queued (Completion.Busy's fallback), which would add its
// wait in the queue, nor since the sweep before.
func TestUnseenCommandCreditedNothingBilledNothing(t *testing.T) {
	l := newBlockLayout(1, 8, false)
	mem := make([]byte, l.size)
	b := &Backend{epoch: time.Now().Add(-time.Second)}
	v := &cudaVM{b: b, blk: newBlock(l, mem)}
	ch := &channel{vm: v, base: v.blk.chanBase(0)}
	w := &workerConn{}
	ch.q = []item{{seq: 1, w: w, op: abi.OpNop, submitAt: 100}}
	v.blk.store(l.codeOff(0, 1)+codeStamp, 1) // its code: OK
	v.blk.store(ch.base+offStart, 1)
	v.blk.store(ch.base+offEnd, 1)
	b.prevSweep = 900_000_000
	ch.readMarkers()
	unseen, running := ch.peek(nil, nil)
	if len(unseen) != 1 || unseen[0].seq != 1 || len(running) != 0 {
		t.Fatalf("peek found %+v ended unseen and %+v running, want seq 1 unseen", unseen, running)
	}
	b.unseen, b.now1 = unseen, running
	b.credit(1000)
	b.lastSweep = 1_000_000_000 // this sweep's instant
	out, _ := ch.sweep(nil)
	if len(out) != 1 || out[0].c.Code != abi.OK {
		t.Fatalf("deliveries %+v, want one OK", out)
	}
	if c := out[0].c; c.Busy() != 0 || c.End < 900_000_000 {
		t.Fatalf("start %d end %d, busy %d: want billed nothing", c.Start, c.End, c.Busy())
	}
}
