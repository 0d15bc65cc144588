package cuda

import (
	"fmt"
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
// whenever the VM has commands on the GPU: one thread, on a stream of its
// own, that reads %globaltimer in a loop, as LoGA's poller reads which
// channel the GPU runs, but from within: a step between two reads no
// longer than the gap (as THROTTLE counts, DefaultGapNs) is time its
// context held the GPU, a longer one time it was switched out. Each step
// it also reads its VM's channels' markers, and counts the step only when
// one of them runs a command (start marker ahead of the end marker), so
// that launch gaps and idle time are nobody's as before. It adds the steps
// up in channel 0's block (offSentRan) and ends when no channel has a
// command issued and not ended (offIssued, which the worker stores before
// it issues each command). Contexts run one at a time under time slicing,
// so one tracer at a time runs on the whole GPU.
//
// The completer reads each VM's count at every sweep while tracing is on,
// and bills an interval in which several VMs ran by the counts: each VM
// its count's growth over the interval (at the interval's ends as the
// trapezoid puts it), the rest of the busy time being the switches'
// (SwitchOverhead), measured and not estimated. An interval where a VM ran
// whose tracer did not run throughout (it had not started, or its count
// was not read at the sweep before) is split as before.
//
// The mediator turns tracing on in every VM's block (offTracing) at the
// first sweep where two VMs ran and off traceLinger after the last one: a
// VM alone, or VMs taking turns, launch no tracer. The worker, before it
// issues a command with tracing on, launches tracer n+1 only when tracer n
// has started (offSentLive = n): one waits behind the running one at most,
// and a command issued while one waits is seen by it when it starts (the
// worker stores offIssued before it reads offSentLive, the tracer stores
// offSentLive before it reads offIssued, both with a full fence: one of
// them sees the other's store).
//
// A VM's kernels run in the tracer's context and could write its words as
// they could write the markers (doc.go, "Limits"): a VM that lowers its
// count lowers its own bill only, as one that forges its end markers does;
// its neighbours' bills are their own tracers' counts.

// traceLinger is how long tracing stays on after the last sweep at which
// two VMs ran (completer time, ns).
const traceLinger = 100_000_000

// tracerPTX is the tracer kernel (one thread):
//
//	live = idx; fence
//	ran = *count
//	loop: busy, queued = any start > end, any issued > end (every channel)
//	      step = timer - last; if step <= gap && busy { ran += step; *count = ran }
//	      while queued
//	done = idx
//
// Its parameters: channel 0's block, the blocks' stride, the channels, the
// gap, its number.
//
// It is in the throttle kernel's module (throttlePTX), after it.
const tracerPTX = `
.visible .entry sluice_tracer(
	.param .u64 p_base,
	.param .u64 p_stride,
	.param .u64 p_nch,
	.param .u64 p_gap,
	.param .u64 p_idx
)
{
	.reg .pred %p<6>;
	.reg .b64 %rd<16>;

	ld.param.u64 %rd1, [p_base];
	ld.param.u64 %rd2, [p_stride];
	ld.param.u64 %rd3, [p_nch];
	ld.param.u64 %rd4, [p_gap];
	ld.param.u64 %rd5, [p_idx];
	st.volatile.global.u64 [%rd1+32], %rd5;
	membar.sys;
	ld.volatile.global.u64 %rd6, [%rd1+24];
	mov.u64 %rd7, %globaltimer;
TRACE_LOOP:
	setp.ne.u64 %p1, %rd3, %rd3;
	setp.ne.u64 %p2, %rd3, %rd3;
	mov.u64 %rd8, %rd1;
	mov.u64 %rd9, 0;
TRACE_SCAN:
	ld.volatile.global.u64 %rd10, [%rd8];
	ld.volatile.global.u64 %rd11, [%rd8+8];
	ld.volatile.global.u64 %rd12, [%rd8+16];
	setp.gt.or.u64 %p1, %rd10, %rd11, %p1;
	setp.gt.or.u64 %p2, %rd12, %rd11, %p2;
	add.u64 %rd8, %rd8, %rd2;
	add.u64 %rd9, %rd9, 1;
	setp.lt.u64 %p3, %rd9, %rd3;
	@%p3 bra TRACE_SCAN;
	mov.u64 %rd13, %globaltimer;
	sub.u64 %rd14, %rd13, %rd7;
	mov.u64 %rd7, %rd13;
	setp.le.and.u64 %p4, %rd14, %rd4, %p1;
	@!%p4 bra TRACE_NEXT;
	add.u64 %rd6, %rd6, %rd14;
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

// loadTracer finds the tracer in module m (the throttle kernel's) and makes its stream, and takes up the
// numbering where a worker before this one left it: no tracer of its runs
// (its context went with it), so none is live.
func (w *worker) loadTracer(m cuModule) (err error) {
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
	a := w.tracerArgs[:]
	le.PutUint64(a[0:], uint64(ch0.dev))
	le.PutUint64(a[8:], uint64(w.blk.l.chanStride))
	le.PutUint64(a[16:], uint64(len(w.chans)))
	le.PutUint64(a[24:], w.cfg.GapNs)
	le.PutUint64(a[32:], w.tracers+1)
	if err := w.d.LaunchKernel(w.tracer, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, w.traceStream, a); err != nil {
		return err
	}
	w.tracers++
	return nil
}

// tracerCount is a VM's tracer state as the completer reads it at a sweep.
type tracerCount struct {
	gen   uint64  // the credit that read it (Backend.creditGen)
	ran   uint64  // the count then
	live  bool    // a tracer ran then
	delta float64 // its growth since the read before
	fresh bool    // delta holds: the read before was the previous credit's, and a tracer ran at both
}

// readTracer reads v's tracer count for credit gen (once a credit).
func (v *cudaVM) readTracer(gen uint64) {
	t := &v.tc
	if t.gen == gen {
		return
	}
	base := v.blk.chanBase(0)
	ran := v.blk.load(base + offSentRan)
	live, done := v.blk.load(base+offSentLive), v.blk.load(base+offSentDone)
	now := live > done
	t.fresh = t.gen == gen-1 && t.live && now && ran >= t.ran
	t.delta = 0
	if t.fresh {
		t.delta = float64(ran - t.ran)
	}
	t.gen, t.ran, t.live = gen, ran, now
}

// setTracing turns the tracer on or off in v's block.
func (v *cudaVM) setTracing(on bool) {
	if v.tracing == on {
		return
	}
	v.tracing = on
	var x uint64
	if on {
		x = 1
	}
	v.blk.store(offTracing, x)
}

// traceTurn turns tracing on for the VMs that ran at this sweep's credit
// when two or more did (overlapped), and off for every VM traceLinger after
// the last such sweep (the completer's, after each credit).
func (b *Backend) traceTurn(now int64, overlapped bool, chans []*channel) {
	switch {
	case overlapped:
		b.overlapAt, b.traceOn = now, true
		for _, r := range b.now1 {
			r.ch.vm.setTracing(true)
		}
		for _, r := range b.running {
			r.ch.vm.setTracing(true)
		}
	case b.traceOn && now-b.overlapAt > traceLinger:
		b.traceOn = false
		for _, ch := range chans {
			ch.vm.setTracing(false)
		}
	}
}

// tracedInterval reads the tracer of every VM that ran at an end of
// credit gen's interval and reports whether each one's count holds for
// it.
func (b *Backend) tracedInterval(gen uint64) bool {
	ok := true
	for _, refs := range [2][]runRef{b.running, b.now1} {
		for _, r := range refs {
			v := r.ch.vm
			v.readTracer(gen)
			ok = ok && v.tc.fresh
		}
	}
	return ok
}

// tracedOverhead is what a traced interval's VMs did not run of the time
// something ran at its ends (half for each end at which one did): the
// switches between their contexts, nobody's.
func (b *Backend) tracedOverhead(gen uint64, half float64, vms [2]int) float64 {
	busy := 0.0
	for end := range 2 {
		if vms[end] > 0 {
			busy += half
		}
	}
	var ran float64
	for _, refs := range [2][]runRef{b.running, b.now1} {
		for _, r := range refs {
			if v := r.ch.vm; v.tc.gen == gen && v.traceCounted != gen {
				v.traceCounted = gen
				ran += v.tc.delta
			}
		}
	}
	return max(0, busy-ran)
}

// TracedNs is how long the intervals in which several VMs ran and which
// were billed by their tracers' counts lasted in all (the rest of such
// intervals were split evenly, less the switch overhead's fraction).
func (b *Backend) TracedNs() int64 { return b.tracedNs.Load() }
