package cuda

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// throttleEndedUnstamped queues one THROTTLE on a timeline's channel whose
// end marker and record are there and whose code slot is not stamped yet
// (its worker stamps it after the launch call returns).
func throttleEndedUnstamped(t *testing.T) (*timeline, *channel) {
	t.Helper()
	tl := newTimeline([]int{1}, 1)
	ch := tl.vms[0].chans[0]
	ch.q[0].op = abi.OpThrottle
	blk := ch.vm.blk
	blk.store(blk.l.codeOff(0, 1)+codeStamp, 0)
	rec := ch.base + blk.l.slotOff(1)
	blk.store(rec+8, 1000)
	blk.store(rec+16, 11_000)
	blk.store(rec, 10_000)
	blk.store(rec+24, 1) // the kernel's record
	tl.mark(0, 0, 1, 1)  // it ran and ended
	return tl, ch
}

// TestThrottleWaitsForItsCode: a THROTTLE whose end is seen before its
// worker stamped its code is delivered once the code is there, with that
// code, not failed (abi.ErrDevice, a slot that names another command).
func TestThrottleWaitsForItsCode(t *testing.T) {
	for _, code := range []abi.ErrorCode{abi.OK, abi.ErrBadHandle} {
		tl, ch := throttleEndedUnstamped(t)
		for range 2 {
			if _, got := tl.sweep(); len(got) != 0 {
				t.Fatalf("delivered %+v before its code was stamped", got)
			}
		}
		off := ch.vm.blk.l.codeOff(0, 1)
		ch.vm.blk.store(off+codeValue, uint64(code))
		ch.vm.blk.store(off+codeStamp, 1)
		_, got := tl.sweep()
		if cs := got[1]; len(cs) != 1 || cs[0].Code != code {
			t.Fatalf("code %v: delivered %+v, want one with %v", code, cs, code)
		}
	}
}

// TestThrottleWaitsForItsCodeWhileTheWorkerLives: a THROTTLE whose end is
// there but whose code is not went through (a launch that failed stamps
// its code before its markers are queued) and waits for its code as long
// as its worker lives, recordWait and more (the worker descheduled between
// its launch call's return and the stamp), not failed with abi.ErrDevice.
// Once the worker ended it fails as the worker's other unfinished commands
// (lostCode: abi.ErrTimedOut after the watchdog); a VM that closes waits
// recordWait at most (abi.ErrShutdown).
func TestThrottleWaitsForItsCodeWhileTheWorkerLives(t *testing.T) {
	tl, ch := throttleEndedUnstamped(t)
	for range 2 {
		if _, got := tl.sweep(); len(got) != 0 {
			t.Fatalf("delivered %+v before its code was stamped, its worker alive", got)
		}
		ch.q[0].endAt -= 10 * recordWait // seen that long ago
	}
	off := ch.vm.blk.l.codeOff(0, 1)
	ch.vm.blk.store(off+codeValue, uint64(abi.OK))
	ch.vm.blk.store(off+codeStamp, 1)
	if _, got := tl.sweep(); len(got[1]) != 1 || got[1][0].Code != abi.OK {
		t.Fatalf("stamped after 20 recordWaits: delivered %+v, want abi.OK", got)
	}

	for _, timedOut := range []bool{false, true} {
		tl, ch := throttleEndedUnstamped(t)
		w := &workerConn{finalEnd: []uint64{1}}
		w.timedOut.Store(timedOut)
		w.dead.Store(true)
		ch.q[0].w = w
		if _, got := tl.sweep(); len(got[1]) != 1 || got[1][0].Code != w.lostCode() {
			t.Fatalf("worker ended (timed out %v): delivered %+v, want %v", timedOut, got, w.lostCode())
		}
	}

	tl, ch = throttleEndedUnstamped(t)
	ch.vm.closing.Store(true)
	if _, got := tl.sweep(); len(got) != 0 {
		t.Fatalf("closing: delivered %+v at once", got)
	}
	ch.q[0].endAt -= recordWait
	if _, got := tl.sweep(); len(got[1]) != 1 || got[1][0].Code != abi.ErrShutdown {
		t.Fatalf("closing, after recordWait: delivered %+v, want abi.ErrShutdown", got)
	}
}

// TestThrottleLaunchReturnsLate: a worker whose THROTTLE launch call
// returns long after the kernel ended (preempted, throttled by its cgroup)
// stamps the code late; the command completes OK, as it ran, with its
// ground truth.
func TestThrottleLaunchReturnsLate(t *testing.T) {
	r := newRig(t, nil)
	r.f.mu.Lock()
	r.f.lateLaunch = 5 * time.Duration(recordWait)
	r.f.mu.Unlock()
	vm := r.attach(1, 1, make([]byte, 4096))
	r.submit(vm, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 1500}, 0)
	r.submit(vm, 0, abi.Command{Op: abi.OpNop}, 1)
	codes(t, wait(t, r.done, 2), abi.OK, abi.OK)
	if ns, kernels, ok := r.b.GroundTruth(1); !ok || ns != 1500 || kernels != 1 {
		t.Fatalf("ground truth %d ns, %d kernels, %v; want 1500, 1", ns, kernels, ok)
	}
}

// TestOnlyThrottleWaitsForItsCode: a command of another kind finds its
// code before its end marker; an unstamped slot fails it at once.
func TestOnlyThrottleWaitsForItsCode(t *testing.T) {
	tl, ch := throttleEndedUnstamped(t)
	ch.q[0].op = abi.OpNop
	if _, got := tl.sweep(); len(got[1]) != 1 || got[1][0].Code != abi.ErrDevice {
		t.Fatalf("delivered %+v, want abi.ErrDevice", got)
	}
}

// TestSweepReadsTheClockOnce: a sweep reads the clock once, its own
// instant, whatever it finds: a command still running, a new start, an
// end. Starts and ends are timed at that instant (the markers were read
// right after it), and a sweep that delivers is no longer for reading it
// again: the interval after it is what a short kernel's start is seen
// within.
func TestSweepReadsTheClockOnce(t *testing.T) {
	tl := newTimeline([]int{1}, 2)
	var reads int
	tl.b.clock = func() int64 { reads++; return int64(1000 * reads) }
	sweep := func() (int64, int) {
		reads0 := reads
		tl.b.sweep(nil)
		return tl.b.lastSweep, reads - reads0
	}
	ch := tl.vms[0].chans[0]
	tl.mark(0, 0, 1, 0) // command 1 starts
	at, n := sweep()
	if n != 1 || ch.q[0].startAt != at {
		t.Errorf("a sweep that saw a start read the clock %d times, noted it at %d; want once, at %d", n, ch.q[0].startAt, at)
	}
	for range 3 {
		if _, n := sweep(); n != 1 {
			t.Errorf("a sweep of a command running on read the clock %d times, want 1", n)
		}
	}
	tl.mark(0, 0, 2, 1) // 1 ended, 2 runs
	reads0 := reads
	out := tl.b.sweep(nil)
	if n := reads - reads0; n != 1 || len(out) != 1 || out[0].c.End != tl.b.lastSweep || ch.q[0].startAt != tl.b.lastSweep {
		t.Errorf("a sweep that saw an end and a start read the clock %d times, ended %+v, noted the start at %d; want once, both at %d", n, out, ch.q[0].startAt, tl.b.lastSweep)
	}
}

// TestDeadWorkersFinalMarkersJudge: a worker that ends a command and dies
// between a sweep's reading of the markers and its judging of the queue
// (CI: a LOAD_MODULE, then a launch that faulted the context) leaves that
// command ended by its final markers; it completes with its code, not as
// lost. Commands past its final end fail as lost, whatever a fresh
// worker's markers say.
func TestDeadWorkersFinalMarkersJudge(t *testing.T) {
	// The sweep reads end 0 (older than the death), or 5 (a fresh
	// worker's); the dead worker ended command 1 and not 2. Both codes
	// are stamped OK (newTimeline).
	for _, read := range []uint64{0, 5} {
		tl := newTimeline([]int{1}, 2)
		ch := tl.vms[0].chans[0]
		w := &workerConn{finalEnd: []uint64{1}}
		w.dead.Store(true)
		ch.q[0].w, ch.q[1].w = w, w
		tl.mark(0, 0, read, read)
		_, got := tl.sweep()
		if cs := got[1]; len(cs) != 2 || cs[0].Code != abi.OK || cs[1].Code != w.lostCode() {
			t.Fatalf("markers read at %d: delivered %+v, want OK then %v", read, cs, w.lostCode())
		}
	}
}

// TestEndNotBeforeStart: ReadStatus notes a start under the channel's lock
// at its own instant, which can be later than the instant of a sweep that
// then finds the command ended (it read the markers after ReadStatus): the
// end is timed no earlier than the start.
func TestEndNotBeforeStart(t *testing.T) {
	tl := newTimeline([]int{1}, 1)
	clock := int64(20_000)
	tl.b.clock = func() int64 { return clock }
	tl.mark(0, 0, 1, 0)
	var st backend.Status
	tl.b.ReadStatus(&st) // notes the start at 20 µs
	clock = 10_000       // the sweep's instant came first
	tl.mark(0, 0, 1, 1)
	out := tl.b.sweep(nil)
	if len(out) != 1 || out[0].c.Start != 20_000 || out[0].c.End < out[0].c.Start {
		t.Fatalf("delivered %+v, want it started at 20000 and ended no earlier", out)
	}

	// Never seen running, submitted after the sweep's instant (a callback
	// on the deliverer) and ended before its marker read.
	tl = newTimeline([]int{1}, 1)
	tl.b.clock = func() int64 { return 10_000 }
	tl.vms[0].chans[0].q[0].submitAt = 12_000
	tl.mark(0, 0, 1, 1)
	out = tl.b.sweep(nil)
	if len(out) != 1 || out[0].c.End < out[0].c.Start || out[0].c.Start < 12_000 {
		t.Fatalf("delivered %+v, want it started at its submission (12000) and ended no earlier", out)
	}
}

// TestDelivererTakesTheRecord: a THROTTLE's ground-truth record is the
// deliverer's to take, not the sweep's (a line the GPU wrote, read inside
// the interval a short kernel's start is seen within): the sweep delivers
// the command at its end marker, record or not. Only where ground truth is
// kept: the deliverer then waits for a record that lands after the
// marker, and gives up recordLate after the end was seen. Until the
// deliverer took a command, Submit reuses no slot of it or of those after
// it (TestSubmitSpareSlotsTheDelivererReads).
func TestDelivererTakesTheRecord(t *testing.T) {
	for _, keep := range []bool{false, true} {
		tl := newTimeline([]int{1}, 1)
		ch := tl.vms[0].chans[0]
		v := ch.vm
		v.truth.keep.Store(keep)
		var got []backend.Completion
		v.complete = func(c backend.Completion) { got = append(got, c) }
		v.drained = make(chan struct{}, 1)
		v.undelivered.Store(1)
		tl.b.outstanding.Store(1)
		ch.q[0].op = abi.OpThrottle
		tl.b.clock = func() int64 { return 1_000_000 } // stopped: the deliverer waits as long as it takes
		tl.mark(0, 0, 1, 1)                            // ended; its record is not there
		out := tl.b.sweep(nil)
		if len(out) != 1 || out[0].seq != 1 || out[0].record != keep {
			t.Fatalf("keep %v: the sweep delivered %+v, want the THROTTLE at its end marker, its record to take %v", keep, out, keep)
		}
		if !keep {
			tl.b.deliver(out[0])
			if len(got) != 1 || ch.readThrough.Load() != 1 {
				t.Fatalf("delivered %+v, read through %d", got, ch.readThrough.Load())
			}
			continue
		}
		done := make(chan struct{})
		go func() { tl.b.deliver(out[0]); close(done) }()
		time.Sleep(5 * time.Millisecond)
		select {
		case <-done:
			t.Fatal("delivered before its record landed")
		default:
		}
		rec := ch.base + v.blk.l.slotOff(1)
		v.blk.store(rec, 700)
		v.blk.store(rec+8, 5000)
		v.blk.store(rec+16, 5700)
		v.blk.store(rec+24, 1) // it lands
		<-done
		if ns, n := v.truth.total(); ns != 700 || n != 1 || len(got) != 1 || ch.readThrough.Load() != 1 {
			t.Fatalf("ground truth %d ns of %d kernels, delivered %d, read through %d; want 700 of 1, 1, 1", ns, n, len(got), ch.readThrough.Load())
		}
	}

	// One that never lands: given up recordLate after the end was seen.
	tl := newTimeline([]int{1}, 1)
	ch := tl.vms[0].chans[0]
	clock := int64(0)
	tl.b.clock = func() int64 { clock += 1000; return clock }
	if ch.takeRecord(1, 0) || clock < recordLate {
		t.Fatalf("a record that never came: taken, or given up at %d ns, before recordLate", clock)
	}
}

// TestSubmitSpareSlotsTheDelivererReads: a channel's commands the sweep
// handed to the deliverer keep their slots (seq % slots) until it took
// them, the record or the hop trace it reads there: commands without a
// record after a THROTTLE that waits for its record leave the channel's
// queue, but a Submit a whole ring of seqs later is refused until the
// deliverer is past the THROTTLE.
func TestSubmitSpareSlotsTheDelivererReads(t *testing.T) {
	tl := newTimeline([]int{1}, 0)
	ch := tl.vms[0].chans[0]
	v := ch.vm
	slots := v.blk.l.slots
	ch.seq = uint64(slots) // 1 (a THROTTLE) .. slots went out, all delivered by the sweep
	v.complete = func(backend.Completion) {}
	v.drained = make(chan struct{}, 1)
	submit := func() error { return v.Submit(0, abi.Command{Op: abi.OpNop}, 0) }
	if err := submit(); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("a Submit that would reuse the slot of command 1, not taken yet: %v", err)
	}
	ch.readThrough.Store(1) // the deliverer took command 1
	if err := submit(); err != nil {
		t.Fatalf("once the deliverer took command 1: %v", err)
	}
}
