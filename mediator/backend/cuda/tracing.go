package cuda

import (
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// The tracer: which VM's context holds the GPU, seen from inside it.
//
// Where two VMs' contexts have work at once (the policy leaves the GPU's
// arbitration to the driver, or a command ran past its turn), the driver
// time-slices between them, and no CUDA interface says which context holds
// the GPU at an instant: both VMs' commands show as running from their
// markers, and how long each ran of the time is not what their markers say.
// Split evenly (less the switch overhead, switchcost.go), two VMs whose
// kernels differ tenfold were billed 2-3% off on an H100: the driver does
// not give both the same time.
//
// So while VMs overlap, each VM's worker runs a tracer in its context
// whenever the VM has commands on the SMs: one thread, on a stream of its
// own, that reads %globaltimer in a loop, as LoGA's poller reads which
// channel the GPU runs, but from within: a step between two reads no
// longer than the gap (as THROTTLE counts, DefaultGapNs) is time its
// context held the GPU, a longer one time it was switched out. It adds
// the steps up in channel 0's block (offSentRan) and ends when no channel
// has a command issued and not ended (offIssued, which the worker stores
// before it issues a LAUNCH, THROTTLE or MEMSET; copies run beside other
// contexts' kernels and are left alone). Contexts run one at a time under
// time slicing, so one tracer at a time runs on the whole GPU.
//
// The completer reads every VM's count at every sweep while tracing is
// on. A round of the tracer's reads counts only where one of its VM's
// commands had started and not ended: the count is the time its context
// held the GPU while its commands ran, without the launch gaps between
// them (14-18% of a 20 µs-kernel VM's count on an H100 when they were
// in). A VM that ran at an end of an interval is billed its count, an
// interval's worth at a time; what it carries past that (the count lands
// a round late, in lumps, or grew while the VM's commands ran between two
// sweeps, at neither) is billed at its next intervals, and in full where
// its busy stretch ends (tracedInterval). A VM waiting its turn, its
// kernel preempted, is billed nothing; what nobody is billed of the time
// something ran is the switches' (SwitchOverhead), measured and not
// estimated. A VM that ran whose tracer was not running at this sweep and
// the one before shares what the traced VMs left, less the switches' time
// (splitUntraced); an interval in which no VM's tracer ran is split
// evenly, as without tracing. The switches' fraction, once the tracers
// measured it, is theirs (learnOverhead).
//
// The mediator turns tracing on in the block of each VM that ran or had
// work on the GPU at the first sweep where two VMs did (offTracing; work
// waiting beside a running VM's is enough, traceTurn), and off in every
// VM's traceLinger after the last such sweep: a VM alone, or VMs taking
// turns, launch no tracer. An interval in which one VM ran and no other
// had work on the GPU or its tracer running is billed as a VM alone's
// while tracing is on too. The worker, after it issues a command that is the
// tracer's with tracing on, launches tracer n+1 only when tracer n has
// started (offSentLive = n): one waits behind the running one at most,
// and a command issued while one waits is seen by it when it starts (the
// worker stores offIssued before it reads offSentLive, the tracer stores
// offSentLive before it reads offIssued, both with a full fence: one of
// them sees the other's store). A worker asleep with commands on the GPU
// is rung when tracing comes on.
//
// A VM's kernels run in the tracer's context and could write its words as
// they could write the markers (doc.go, "Limits"). A VM that lowers its
// count lowers its own bill only, as one that forges its end markers does,
// and one that raises it is billed more: at most the time its tracer could
// have counted while the VM had commands queued (the queue is the
// mediator's), less what its count billed, and a round's slack (room,
// countSlack);
// its neighbours' bills are their own tracers' counts, and where theirs do
// not run, what the counts left less the switches' fraction, which the
// counts move no further than between the probe's f and 2f
// (overheadFraction). One that makes its tracer look stopped makes the
// intervals it runs in split evenly, as they were without tracing; one
// that forges its offIssued keeps tracing on and its neighbours billed by
// their own counts where they would have been billed as VMs alone. The
// watchdog's clock does not go by the counts (the even part), and the
// worker launches two tracers at most while its tracer stream does not
// drain, whatever the words say.

// traceLinger is how long tracing stays on after the last sweep at which
// two VMs ran (completer time, ns).
const traceLinger = 100_000_000

// tracerPTX is the tracer kernel (one thread):
//
//	live = idx; fence
//	ran = *count
//	loop: round = 0
//	      for each channel:
//	          start, end = one load; issued
//	          queued |= issued > end
//	          running |= start > end
//	          step = timer - last
//	          if step <= gap { usual += (step - usual) / 16 } else { step = usual / 2; outs++ }
//	          round += step
//	      if running { ran += round; *count = ran }
//	      while queued
//	done = idx
//
// A round counts only where a command of its VM's had started and not
// ended at one of its channels' reads: the time its context holds the GPU
// between its commands (the markers, the launch gaps of a VM of short
// kernels, 14-18% of a 20 µs-kernel VM's count on an H100) is not its
// kernels' time. A channel's start and end markers are read in one 16-byte
// load (they are adjacent; one PCIe read where measured, though PTX does
// not promise the two words one instant): read one after the other, a
// command's start would be seen at the later read and its end at the
// earlier, and every command would count the reads' distance more.
//
// A step is one channel's marker reads, over PCIe, a microsecond or two
// however many channels the VM has (a step of all of them went past the
// gap from about 14 channels on, and counted nothing), and its count lands
// a round, every channel's step, at a time. A step
// longer than the gap is one in which its context was switched out; the
// switch came anywhere in it, and the context held the GPU for the part
// before, half a usual step on average (the steps' running average, not
// the last one, which a slow read can make ten times as long), which is
// what it counts of it. (A tracer of two warps, a timer stepping
// in tens of nanoseconds and publishing every 256 ns beside a scanner,
// billed a VM of 20 µs kernels beside two others 2-4% over on an H100,
// this one 1-2%: its count lands about a sweep late, at a command's start
// as at its end.)
//
// Its parameters: channel 0's block, the blocks' stride, the channels, the
// gap, its number. A module of its own: a driver that does not take it
// leaves the VM running, untraced.
const tracerPTX = `
.version 7.0
.target sm_70
.address_size 64

.visible .entry sluice_tracer(
	.param .u64 p_base,
	.param .u64 p_stride,
	.param .u64 p_nch,
	.param .u64 p_gap,
	.param .u64 p_idx
)
{
	.reg .pred %p<6>;
	.reg .b64 %rd<20>;

	ld.param.u64 %rd1, [p_base];
	ld.param.u64 %rd2, [p_stride];
	ld.param.u64 %rd3, [p_nch];
	ld.param.u64 %rd4, [p_gap];
	ld.param.u64 %rd5, [p_idx];
	st.volatile.global.u64 [%rd1+32], %rd5;
	membar.sys;
	ld.volatile.global.u64 %rd6, [%rd1+24];
	ld.volatile.global.u64 %rd17, [%rd1+48];
	mov.u64 %rd7, %globaltimer;
	mov.u64 %rd15, 0;
TRACE_LOOP:
	setp.ne.u64 %p2, %rd3, %rd3;
	setp.ne.u64 %p1, %rd3, %rd3;
	mov.u64 %rd18, 0;
	mov.u64 %rd8, %rd1;
	mov.u64 %rd9, 0;
TRACE_SCAN:
	ld.volatile.global.v2.u64 {%rd19, %rd11}, [%rd8];
	ld.volatile.global.u64 %rd12, [%rd8+16];
	setp.gt.or.u64 %p2, %rd12, %rd11, %p2;
	setp.gt.or.u64 %p1, %rd19, %rd11, %p1;
	mov.u64 %rd13, %globaltimer;
	sub.u64 %rd14, %rd13, %rd7;
	mov.u64 %rd7, %rd13;
	setp.le.u64 %p4, %rd14, %rd4;
	@!%p4 bra TRACE_OUT;
	setp.eq.u64 %p5, %rd15, 0;
	@%p5 mov.u64 %rd15, %rd14;
	sub.s64 %rd16, %rd14, %rd15;
	shr.s64 %rd16, %rd16, 4;
	add.s64 %rd15, %rd15, %rd16;
	bra TRACE_COUNT;
TRACE_OUT:
	add.u64 %rd17, %rd17, 1;
	st.volatile.global.u64 [%rd1+48], %rd17;
	shr.u64 %rd14, %rd15, 1;
TRACE_COUNT:
	add.u64 %rd18, %rd18, %rd14;
	add.u64 %rd8, %rd8, %rd2;
	add.u64 %rd9, %rd9, 1;
	setp.lt.u64 %p3, %rd9, %rd3;
	@%p3 bra TRACE_SCAN;
	@!%p1 bra TRACE_NEXT;
	add.u64 %rd6, %rd6, %rd18;
	st.volatile.global.u64 [%rd1+24], %rd6;
TRACE_NEXT:
	@%p2 bra TRACE_LOOP;
	st.volatile.global.u64 [%rd1+40], %rd5;
	ret;
}
`

// tracerName is the tracer's entry point.
const tracerName = "sluice_tracer"

// tracerArgsSize is the size of the tracer's packed parameters.
const tracerArgsSize = 40

// loadTracer loads the tracer and makes its stream, and takes up the
// numbering where a worker before this one left it: no tracer of its runs
// (its context went with it), so none is live.
func (w *worker) loadTracer() error {
	m, err := w.d.ModuleLoadData(append([]byte(tracerPTX), 0))
	if err != nil {
		return fmt.Errorf("loading the tracer: %w", err)
	}
	if w.tracer, err = w.d.ModuleGetFunction(m, tracerName); err != nil {
		return fmt.Errorf("finding the tracer: %w", err)
	}
	if w.traceStream, err = w.d.StreamCreate(); err != nil {
		return fmt.Errorf("creating the tracer's stream: %w", err)
	}
	base := w.chans[0].base
	w.tracers = w.blk.load(base + offSentLive)
	w.blk.store(base+offSentDone, w.tracers)
	return nil
}

// trace launches the next tracer if tracing is on and the last one
// launched has started (see the top of this file); the command about to
// be issued has stored its offIssued. A tracer that does not launch leaves
// the VM's overlaps split evenly; only a failure of the context is the
// caller's.
func (w *worker) trace() error {
	if w.tracer == 0 || w.blk.load(offTracing) == 0 {
		return nil
	}
	ch0 := w.chans[0]
	if w.blk.load(ch0.base+offSentLive) != w.tracers {
		return nil // one waits to start: it will see the command
	}
	// offSentLive is in the VM's reach: a VM's kernels that forge it must
	// not pile tracers up on the stream until a launch blocks the worker.
	// Two launched since the stream was last seen idle are one running and
	// one waiting: no more until it has drained.
	if w.traceQueued >= 2 {
		if err := w.d.StreamQuery(w.traceStream); err != nil {
			if sticky(err) && !errors.Is(err, errNotReady) {
				return err
			}
			return nil
		}
		w.traceQueued = 0
	}
	a := w.tracerArgs[:]
	le.PutUint64(a[0:], uint64(ch0.dev))
	le.PutUint64(a[8:], uint64(w.blk.l.chanStride))
	le.PutUint64(a[16:], uint64(len(w.chans)))
	le.PutUint64(a[24:], w.cfg.GapNs)
	le.PutUint64(a[32:], w.tracers+1)
	if err := w.d.LaunchKernel(w.tracer, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, w.traceStream, a); err != nil {
		if sticky(err) {
			return err
		}
		return nil
	}
	w.tracers++
	w.traceQueued++
	return nil
}

// tracerCount is a VM's tracer state as the completer reads it at a sweep.
type tracerCount struct {
	gen   uint64  // the credit that read it (Backend.creditGen)
	ran   uint64  // the count then
	live  bool    // a tracer ran then
	was   bool    // a tracer ran at the read before
	fresh bool    // its count covers the interval: read at the last credit too, a tracer running at both reads (or either, in a long one)
	delta float64 // the count's growth since the read before (fresh)
	// grew is the count's growth since the read before where a tracer ran
	// in between (at either read, or one that started and ended between
	// them), fresh or not: the time its VM's commands ran, which a VM that
	// ran at neither end of the interval is billed later (tracedInterval).
	grew  float64
	n     uint64 // the last tracer started then (offSentLive)
	quiet int64  // how long its VM ran with its tracer live and the count not growing (quietRan)
	// held is the time its context held the GPU, counted and not yet
	// billed or let go (tracedInterval); part is its VM's bill of the
	// interval by its count, the two ends together, and carry what it
	// counted before, billed besides where it is not billed by its count.
	held, part, carry float64
	// room is the time its tracer could have counted in and its VM was
	// not billed for: since held last grew from nothing, the time between
	// reads at which a tracer of its ran and it had commands queued
	// (active, each read's), less what its count billed; held is at most
	// room and the slack of a round (countSlack). prevHeld and prevRoom
	// are what they were before this credit.
	room, active, prevHeld, prevRoom float64
	at                               int64 // when it was read (completer time)
}

// readTracer reads v's tracer for credit gen, of dt, at now (once a
// credit).
func (v *cudaVM) readTracer(gen uint64, dt, now int64) {
	t := &v.tc
	if t.gen == gen {
		return
	}
	span := dt // since the read before: credits with nothing run at either end read no tracer
	if t.at != 0 {
		span = now - t.at
	}
	t.at = now
	base := v.blk.chanBase(0)
	ran := v.blk.load(base + offSentRan)
	live, done := v.blk.load(base+offSentLive), v.blk.load(base+offSentDone)
	on := live > done
	// Its count covers the interval since the read before where a tracer
	// ran at both reads; in an interval longer than countOverHalfNs, where
	// one ran at either (one that started in it counted from its start,
	// one that ended in it up to its end): in a short one the count's
	// edges (a tracer starts after its VM's command, its last step lands
	// late) are off by as much as the half of the interval is.
	// The read before was the last credit's, and the count has not gone
	// back (a worker restarted, or words the VM's kernels wrote).
	next := t.gen != 0 && t.gen == gen-1 && ran >= t.ran
	if !next && t.gen != 0 && ran > t.ran {
		v.dropped[dropGap] += float64(ran - t.ran)
	}
	t.fresh = next && (t.live && on || dt > countOverHalfNs && (t.live || on))
	t.delta, t.grew, t.active = 0, 0, 0
	if next && (t.live || on || live != t.n) {
		t.grew = float64(ran - t.ran)
		if v.queued || v.wasQueued { // the queue is the mediator's: the VM cannot forge it
			t.active = float64(span)
		}
	}
	if t.fresh {
		t.delta = t.grew
	}
	t.gen, t.ran, t.was, t.live, t.n = gen, ran, t.live, on, live
	switch {
	case t.delta > 0:
		t.quiet = 0
	case t.quiet >= traceStale:
		t.fresh = false // a tracer that counts nothing: not to be believed
	}
}

// traceStale is how long a VM may run with its tracer live and counting
// nothing before its count is no longer believed (ns of the intervals in
// which it ran): under time slicing a context waits its turn behind every
// other's, milliseconds each, and a tracer that never counts (stuck, or
// its words forged by the VM's own kernels) would bill its VM nothing.
const traceStale = 200_000_000

// quietRan adds dt to v's time run with its tracer live and its count
// not growing (an interval at whose ends it ran).
func (v *cudaVM) quietRan(dt int64) {
	if v.tc.fresh && v.tc.delta == 0 {
		v.tc.quiet += dt
	}
}

// setTracing turns the tracer on or off in v's block.
func (v *cudaVM) setTracing(on bool) {
	if v.tracing == on {
		return
	}
	v.tracing = on
	if !on {
		v.blk.store(offTracing, 0)
		v.dropped[dropOff] += v.tc.held
		v.tc = tracerCount{} // what it held is not for the next time tracing comes on
		return
	}
	v.blk.store(offTracing, 1)
	// A worker asleep with commands on the GPU launches its tracer when it
	// wakes (it looks at the switch after it says it sleeps).
	if v.blk.load(offSleeping) != 0 {
		var one [8]byte
		le.PutUint64(one[:], 1)
		_, _ = unix.Write(v.efd, one[:])
	}
}

// traceTurn turns tracing on for the VMs that ran at this sweep's credit or
// have work on the GPU (channel.busy) when two or more did (beside), and
// off for every VM traceLinger after the last such sweep (the completer's,
// after each credit). Work waiting beside a running VM turns it on as work
// running does: the waiting VM's context takes the GPU at the driver's
// next time slice, and the running VM's tracer, launched now, starts
// while its context still holds it. Turned on only once two ran, the
// first VM of a start, switched out at once, waited its next slice for
// its tracer (behind fifteen others' slices, 33 ms on an H100), untraced.
func (b *Backend) traceTurn(now int64, beside bool, chans []*channel) {
	switch {
	case beside:
		b.overlapAt, b.traceOn = now, true
		for _, r := range b.now1 {
			r.ch.vm.setTracing(true)
		}
		for _, r := range b.running {
			r.ch.vm.setTracing(true)
		}
		for _, ch := range chans {
			if ch.busy {
				ch.vm.setTracing(true)
			}
		}
	case b.traceOn && now-b.overlapAt > traceLinger:
		b.traceOn, b.untracedLeft = false, 0
		for _, ch := range chans {
			ch.vm.setTracing(false)
		}
	}
}

// tracedInterval reads every VM's tracer for credit gen, of dt, and makes
// each VM's bill of the interval from its count: what the count grew by
// goes into what the VM's context held the GPU for while its commands ran
// and was not yet billed (held); a VM that ran at an end of the interval
// is billed of that the interval at most (part), and all of it where its
// busy stretch ended in the interval; the rest waits for its next
// interval. So a VM is billed its count: it lands in steps (a round of
// its tracer's marker reads, a microsecond or two), later than the time
// it counts, and a command that ran between two sweeps (one that a late
// sweep left unseen) is counted though no sweep saw it; what is held
// carries it to the next sweeps at which the VM runs.
//
// It reports whether a VM that ran at an end of the interval had its
// count cover it (tc.fresh: readTracer)
// and another VM was there to share the GPU with (it ran, had work on the
// GPU, or its tracer ran, at either end) or the interval is long: it is
// then billed by the tracers, and the VMs whose tracers did not run share
// what those that did left (splitUntraced); otherwise it is billed
// otherwise (a VM alone: the trapezoid), and the parts go unused.
func (b *Backend) tracedInterval(gen uint64, dt int64) bool {
	// Every VM's, not only those that ran: a VM between two of its
	// kernels at a sweep would have no read from the sweep before when it
	// next ran.
	present := 0
	b.carried = false
	for _, ch := range *b.chans.Load() {
		if ch.idx != 0 {
			continue
		}
		v := ch.vm
		v.readTracer(gen, dt, b.lastSweep+dt)
		t := &v.tc
		if v.creditGen == gen || v.busy || v.wasBusy || t.live || t.was || t.grew > 0 {
			present++
		}
		carry := t.held
		t.prevHeld, t.prevRoom = carry, t.room
		t.part, t.carry = 0, 0
		slack := v.countSlack()
		counted := carry + t.delta
		if v.creditGen == gen {
			// Its count is its commands' time (the tracer counts only
			// while one has started and not ended), so it is billed all
			// of it, an interval's worth at a time: the rest, a count
			// that landed in a lump (it runs a round behind and catches
			// up), is carried to the next interval at which it runs, and
			// billed in full where its busy stretch ends.
			if v.creditChans[1] == 0 && !v.busy {
				// Its count's growth in the interval is at most the
				// interval and the round it lands late by, whatever the
				// VM's kernels wrote.
				t.part = carry + min(t.delta, float64(dt)+slack)
				t.held = 0
				b.carried = b.carried || carry > 0
			} else {
				t.part = min(carry+t.delta, float64(dt))
				t.held = carry + t.delta - t.part
			}
			// Where it is not billed by its count (its tracer ended or
			// did not start, or the interval is billed as a VM alone's),
			// what it counted before and was not billed is billed
			// besides.
			t.carry = carry
			if !t.fresh {
				v.dropped[dropStale] += t.grew
				t.held = 0
				b.carried = b.carried || carry > 0
			}
		} else {
			// Its commands ran between the sweeps, at neither (a late
			// sweep's long interval held a sleepy VM's whole command),
			// or it ran none: its count goes to the next interval at
			// which it runs. Its tracer may have started and ended in
			// between: the count is its commands' time all the same.
			t.held = carry + t.grew
			counted = t.held
		}
		// An honest carry is time its tracer counted in and its VM was
		// not billed for (room), and the round its count lands late by; a
		// count the VM's kernels forged must not bill it without bound
		// (its own bill, but the switches' time is everyone's). Bounded
		// by the interval instead, a carry of commands that ran inside a
		// long interval (the completer descheduled) shrank at the short
		// ones after, and VMs of 100 µs kernels beside a busy one were
		// billed 5-14% under on an H100.
		t.room = max(0, t.room+t.active-(counted-t.held))
		if h := min(t.held, t.room+slack); h < t.held {
			v.dropped[dropRoom] += t.held - max(h, 0)
			t.held = h
		}
		if t.held <= 0 {
			t.held, t.room = 0, 0
		}
	}
	// The VM that ran had the GPU to itself where no other VM had work on
	// it or its tracer running at either end. It is billed as a VM alone
	// (the trapezoid), not by its count, in a usual sweep's interval: a
	// count lands in steps of a microsecond or two, and sleepy VMs of
	// 100 µs kernels traced alone were billed 3-4% under on an H100.
	traced := false
	if present > 1 || dt > countOverHalfNs {
		for _, v := range b.ranVMs {
			if v.tc.fresh {
				traced = true
				break
			}
		}
	}
	if !traced {
		// Billed otherwise (the VMs that ran had the interval by the
		// trapezoid or evenly): what the counts hold of it is not carried
		// to the next, theirs nor that of a VM whose commands ran
		// between the sweeps.
		for _, ch := range *b.chans.Load() {
			if t := &ch.vm.tc; ch.idx == 0 {
				h := 0.0
				if ch.vm.creditGen == gen {
					t.room = 0
				} else {
					h, t.room = min(t.held, t.prevHeld), t.prevRoom
				}
				ch.vm.dropped[dropOtherwise] += t.held - h
				t.held = h
			}
		}
	}
	return traced
}

// countSlack is how far v's count may run ahead of the time its tracer
// could have counted: a count lands a round of its channels' reads late,
// each read's step at most the gap.
func (v *cudaVM) countSlack() float64 {
	return countOverHalfNs + float64(len(v.chans))*float64(v.b.gap)
}

// countOverHalfNs is the interval past which a VM is billed its count
// even where no other VM was there to share the GPU with, and its count
// read where its tracer ran at one of the interval's reads only (it
// started or ended in it): in a usual sweep's interval (the sweeps come
// every few microseconds) a count's edges are off by as much as the
// interval, and a VM alone is billed by the trapezoid; an interval that a
// late sweep made long (the completer descheduled) is billed by the
// counts: the half of 250 µs intervals billed 100 µs kernels 60-110% over
// on an H100. With a round's steps, it is the slack of a count's bounds
// (countSlack).
const countOverHalfNs = 16_000

// splitUntraced sets, for each end of the traced interval of this credit, the
// part of each VM that ran there without its tracer running (it had not
// started yet: a context's tracer starts at its context's next time
// slice; or its VM runs no kernels, only copies): the end's half less
// what the traced VMs that ran there were billed of it and less the
// switches' time, f of the half, where several VMs ran at it, shared
// evenly. The switches are taken as time, not as a fraction of what is
// left: a VM whose context waits its next time slice behind fifteen
// others has nothing of the half, and what the others leave of it is
// the switches between them (a fraction of the rest billed the first of
// sixteen VMs 3% over on an H100 while it waited for its tracer to start).
func (b *Backend) splitUntraced(half, f float64) {
	var held [2]float64
	var untraced, ran [2]int
	for _, v := range b.ranVMs {
		for end := range 2 {
			if v.creditChans[end] == 0 {
				continue
			}
			ran[end]++
			if v.tc.fresh {
				held[end] += v.atEnd(v.tc.part, end)
			} else {
				untraced[end]++
			}
		}
	}
	if untraced[0]+untraced[1] == 0 {
		b.untracedLeft = 0
	}
	for end := range 2 {
		b.untracedPart[end] = 0
		if untraced[end] == 0 {
			continue
		}
		// Signed, carried from end to end while VMs run untraced: the
		// traced VMs' counts land late, in steps, so what they leave of
		// one end is too much and of the next too little, and the
		// untraced VMs have nothing to give back.
		b.untracedLeft += half - held[end]
		if ran[end] >= 2 {
			b.untracedLeft -= f * half
		}
		// Owed at most an end's half: a VM that runs untraced beside
		// counts that fill the time (a VM of copies only) is not billed
		// nothing for long after.
		b.untracedLeft = max(b.untracedLeft, -half)
		if b.untracedLeft <= 0 {
			continue
		}
		b.untracedPart[end] = b.untracedLeft / float64(untraced[end])
		b.untracedLeft = 0
	}
}

// atEnd is v's share at one end of credit's interval of an amount of the
// whole interval's: all of it where v ran at that end only, half where it
// ran at both.
func (v *cudaVM) atEnd(x float64, end int) float64 {
	if v.creditChans[1-end] != 0 {
		return x / 2
	}
	return x
}

// The switch overhead as the tracers measure it: in the intervals where
// several VMs ran and every one's tracer counted, what their counts left
// of the time something ran (credit). It stands for the probe's f, while
// f is measured (switch_overhead auto), once overheadMinNs of such
// intervals were seen, weighing the last overheadWindowNs or so most: on
// an H100 it was 8-11% where the probe measured 7%, the VMs' contexts
// larger than the probe's and their time slices cut by their own launches.
const (
	overheadMinNs    = 50_000_000
	overheadWindowNs = 500_000_000
)

// learnOverhead adds a fully traced interval in which something ran busy
// ns and the bills left left ns of it.
func (b *Backend) learnOverhead(busy, left float64) {
	b.ovBusy += busy
	b.ovLeft += left
	if b.ovBusy > overheadWindowNs {
		b.ovBusy, b.ovLeft = b.ovBusy/2, b.ovLeft/2
	}
}

// allTraced reports whether every VM that ran at an end of this credit's
// interval had its tracer counting.
func (b *Backend) allTraced() bool {
	for _, v := range b.ranVMs {
		if !v.tc.fresh {
			return false
		}
	}
	return true
}

// overheadFraction is the switch overhead's fraction for credit: the
// tracers' measure where it stands for f (learnOverhead), else f. The
// measure is kept between f and 2f: the counts are in the VMs' reach, and
// a VM whose count says more or less than its context held must not move
// the split of its neighbours' overlaps far (on an H100 the tracers
// measured 8-11% where the probe measured 7%).
func (b *Backend) overheadFraction() float64 {
	f := math.Float64frombits(b.switchF.Load())
	if !b.switchAuto || b.ovBusy < overheadMinNs {
		return f
	}
	return min(max(b.ovLeft/b.ovBusy, f), 2*f, maxSwitchOverhead)
}

// TracedNs is how long the intervals billed by the VMs' tracers lasted in
// all (intervals in which one VM ran among them, while tracing was on).
func (b *Backend) TracedNs() int64 { return b.tracedNs.Load() }

// How an interval's bill was made: one VM ran at its ends (its bill the
// interval's time at those ends, and what its count carried from before
// while tracing), several ran and their tracers' counts held (each its
// count), or several ran and were split evenly less the switch overhead's
// fraction.
const (
	billAlone = iota
	billTraced
	billEven
)

// What of a VM's tracer's count was not billed by it, by why
// (Backend.TracerDropped): it grew between reads that were not the
// credits' one after the other (dropGap); it grew while the VM was billed
// otherwise, its tracer not counting at both reads (dropStale); it was held
// past the time its tracer could have counted (dropRoom); it was held at an
// interval billed otherwise (dropOtherwise); it was held when tracing went
// off (dropOff). A diagnostic of the billing rules (the bench's JSON):
// some of it is the count's edges, which the VM was billed otherwise.
const (
	dropGap = iota
	dropStale
	dropRoom
	dropOtherwise
	dropOff
	nDrops
)

// DropNames names TracerDropped's entries, in order.
var DropNames = [nDrops]string{"gap", "stale", "room", "otherwise", "off"}

// TracerDropped is what of VM id's tracer's count was not billed by it,
// ns, by why (DropNames); read it as BillKinds.
func (b *Backend) TracerDropped(id uint32) (d [nDrops]float64) {
	b.readVM(id, func(v *cudaVM) { d = v.dropped })
	return d
}

// BillKinds is how much of VM id's bill was made each way (billAlone,
// billTraced, billEven), ns, its tracer's count and the switches out it
// saw; read it once the VM's commands have completed (the completer
// writes them).
func (b *Backend) BillKinds(id uint32) (kinds [3]float64, count, outs uint64) {
	b.readVM(id, func(v *cudaVM) {
		base := v.blk.chanBase(0)
		kinds, count, outs = v.billKinds, v.blk.load(base+offSentRan), v.blk.load(base+offSentOuts)
	})
	return kinds, count, outs
}

// readVM runs read on VM id, if there is one, under the sweeps' lock: the
// completer writes what it reads between sweeps, and the sweeps' lock is
// taken first so that a VM that finish takes out after the lookup is not
// unmapped before read is done.
func (b *Backend) readVM(id uint32, read func(v *cudaVM)) {
	b.sweeping.Lock()
	defer b.sweeping.Unlock()
	b.mu.Lock()
	v := b.vms[id]
	b.mu.Unlock()
	if v != nil {
		read(v)
	}
}
