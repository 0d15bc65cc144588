package cuda

import (
	"math"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/spin"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// delivery is a completion on its way to its VM.
type delivery struct {
	vm   *cudaVM
	c    backend.Completion
	seen int64 // when the completer saw its end; 0: never
	// seq is the command's (0: it never went to a worker); record: the
	// deliverer takes its THROTTLE record before the callback (takeRecord);
	// hop: a copy of its item for the hop diagnostic, which reads its trace
	// slot there.
	seq    uint64
	record bool
	hop    *item
}

// idleSpin is how long the completer and the deliverer keep spinning once
// nothing is outstanding, before they park.
const idleSpin = 2_000_000

// completer watches the channels' markers while anything is outstanding
// and sleeps otherwise: it credits GPU time, notes starts, and queues the
// completions that are due for the deliverer. It runs a VM's Complete
// callback itself only where no command could start meanwhile (inline): a
// callback forwards the VM's next commands and takes microseconds, and a
// sweep that waited for it would see late the start of a command the
// stream ran meanwhile (the sweep that found an end is the one that comes
// before such a start), so that time would be credited to nobody: on an
// H100 the bills of 10-37 µs kernels queued back to back were 9-12% under
// their kernels' own time.
//
// Its spinning gives the processor back as internal/spin says: below 4
// processors often (every pass while idle, every sweepYield sweeps while
// busy), on a larger host once every spin.Period or so. A yield there puts
// the goroutine on the scheduler's global queue and resumes it on whichever
// thread takes it: microseconds on a 16-processor GPU host, in which an end
// goes unseen, and after which the callback's data is in another core's
// cache.
func (b *Backend) completer() {
	defer b.done.Done()
	var out []delivery
	busyAt := b.now()
	idle := 0
	y := spin.New()
	for {
		if b.outstanding.Load() == 0 {
			now := b.now()
			// Nothing is on the GPU: the next sweep's interval starts
			// here, with nothing running at its start. Crediting from the
			// last sweep would give the command running at the next one
			// half of the idle time since (credit's trapezoid).
			b.rest(now)
			if now-busyAt < idleSpin {
				// A guest that waits for a completion to submit its next
				// command comes back within microseconds: waking a parked
				// goroutine would take longer than its work's start.
				y.Idle()
				continue
			}
			// Parked, then a last look: a Submit that added to
			// outstanding after it sees parked and wakes it (both
			// sequentially consistent: one sees the other).
			b.parked.Store(true)
			if b.outstanding.Load() != 0 {
				b.parked.Store(false)
				continue
			}
			select {
			case <-b.wake:
			case <-b.stop:
				return
			}
			b.parked.Store(false)
			if b.hops != nil {
				b.hops.parks.Add(1)
			}
			// Woken by the Submit that added work, which starts on the
			// GPU a launch latency later at the earliest: the idle time
			// parked is nobody's.
			b.rest(b.now())
			continue
		}
		select {
		case <-b.stop:
			return
		default:
		}
		out = b.sweep(out[:0])
		busyAt = b.lastSweep // the sweep's clock read
		for _, l := range b.late {
			l.ch.vm.timeOut(l)
		}
		clear(b.late)
		b.late = b.late[:0]
		if len(out) == 0 {
			// Sweep again at once, yielding only now and then: the sweep
			// period is what a command's start and end are seen within,
			// and a launch gap between two short kernels that no sweep
			// sees is billed to the kernel before it.
			if idle++; idle%sweepYield == 0 {
				y.Idle()
			}
			continue
		}
		if b.inline(out) {
			continue
		}
		var handOff int64
		if b.hops != nil {
			handOff = b.now()
		}
		b.ho.push(out)
		if b.hops != nil {
			b.hops.set.add(hopHandOff, b.now()-handOff)
		}
	}
}

// inlineMax is the longest an inline callback may take (a command it
// submits starts a GPU launch latency after its Submit at the earliest,
// about 5 µs on an H100, and the callback's rest after the Submit is what
// a start could be seen late by). One slow callback now and then (the
// thread preempted, a garbage collection's assist) costs at most its own
// lateness once and turns nothing off: each adds inlineSlowCost to a score
// that each callback within the bound takes 1 off, and a score above
// inlineSlowLimit (a consumer slow again and again: three slow callbacks
// in a row, or more than about one in 32 for long) sends the next
// inlineBackoff completions to the deliverer. On an H100 about 1.5% of
// depth-1 callbacks took longer than the bound, and a backoff at each sent
// half of all completions to the deliverer.
const (
	inlineMax       = 10_000
	inlineSlowCost  = 32
	inlineSlowLimit = 64
	inlineBackoff   = 256
)

// inline runs the callbacks of out on the completer, skipping the hand-off
// to the deliverer (a cache line each way and the deliverer's turn: on a
// depth-1 loop, part of every command's round trip), where that costs no
// start a sweep should have seen: out is everything outstanding, so no
// command is on the GPU while the callbacks run but those they submit,
// which start only after a worker's ring read, launch and the GPU's launch
// latency (microseconds: longer than the rest of a callback after its
// Submit), and nothing waits for the deliverer, so each channel's order
// holds. Callbacks that keep taking longer than inlineMax (a slow
// consumer) turn inline delivery off for a while. It reports whether it
// delivered.
// The bench's depth-1 guests submit from the callback; sluiced's callbacks
// publish the completion and wake the guest, whose next command comes
// through its doorbell.
func (b *Backend) inline(out []delivery) bool {
	if b.slowInline > 0 {
		b.slowInline--
		return false
	}
	if b.ho.pending() || b.outstanding.Load() != int64(len(out)) {
		return false
	}
	for _, d := range out {
		start := b.now()
		b.deliver(d)
		b.judgeInline(b.now() - start)
	}
	b.inlined.Add(int64(len(out)))
	return true
}

// judgeInline scores an inline callback that took ns and starts the
// backoff when callbacks were slow too often (inlineSlowLimit).
func (b *Backend) judgeInline(ns int64) {
	switch {
	case ns > inlineMax:
		if b.slowScore += inlineSlowCost; b.slowScore > inlineSlowLimit {
			b.slowInline, b.slowScore = inlineBackoff, 0
		}
	case b.slowScore > 0:
		b.slowScore--
	}
}

// sweepYield: a completer that finds nothing due offers to yield its
// thread (spin.Yielder.Idle) every this many sweeps, not after every one.
const sweepYield = 64

// deliverSpin is how long the deliverer spins after its last delivery
// before it parks: completions closer together than that (a guest waiting
// on each of its commands) wait for no goroutine's wakeup.
const deliverSpin = 200_000

// deliverer runs the VMs' Complete callbacks for what the completer
// handed off, in its order (so each channel's completions arrive in
// order). It spins for deliverSpin after a delivery (yielding as the
// completer does) and parks after that.
func (b *Backend) deliverer() {
	defer b.done.Done()
	h := b.ho
	var taken uint64
	busyAt := b.now()
	y := spin.New()
	for {
		n := h.pushed.Load()
		if n == taken {
			if b.now()-busyAt < deliverSpin {
				y.Idle()
				continue
			}
			if !h.park(taken, b.stop) {
				return
			}
			continue
		}
		busyAt = b.now()
		for ; taken < n; taken++ {
			b.deliver(h.pop())
			h.taken.Store(taken + 1)
		}
	}
}

// deliver takes d's ground-truth record, runs its callback and counts it
// delivered.
func (b *Backend) deliver(d delivery) {
	if d.seq != 0 {
		ch := d.vm.chans[d.c.Channel]
		got := d.record && ch.takeRecord(d.seq, d.seen)
		if h := b.hops; h != nil && d.hop != nil {
			h.completed(ch, d.hop, got)
		}
		// Its slots are read: Submit may reuse them (before the callback,
		// whose Submit can).
		ch.readThrough.Store(d.seq)
	}
	if h := b.hops; h != nil {
		start := b.now()
		h.callback(d.vm.chans[d.c.Channel], d.seen, start)
		d.vm.complete(d.c)
		h.set.add(hopCallback, b.now()-start)
	} else {
		d.vm.complete(d.c)
	}
	if d.vm.undelivered.Add(-1) == 0 {
		select {
		case d.vm.drained <- struct{}{}:
		default:
		}
	}
	b.outstanding.Add(-1)
}

// runRef is a channel's command that ran between two sweeps: seen running
// at the first (Backend.running), or never seen running and found ended at
// the second (Backend.unseen).
type runRef struct {
	ch  *channel
	seq uint64
}

// sweep credits the GPU time since the last sweep, collects the completions
// that are due, in each channel's order, and notes what runs now. Each
// channel's markers are read once (peek), before the credit: what runs now
// and the commands that ran and ended unseen since the last sweep take
// their part of it.
func (b *Backend) sweep(out []delivery) []delivery {
	b.sweeping.RLock()
	defer b.sweeping.RUnlock()
	now := b.now()
	if b.hops != nil {
		b.hops.swept(now-b.lastSweep, b.delivered)
	}
	chans := *b.chans.Load()
	b.unseen, b.now1 = b.unseen[:0], b.now1[:0]
	// Every channel's markers first, at the sweep's instant: peek takes
	// each channel's lock, which a Submit on it (the deliverer's callback
	// right after an end) holds for a while, and markers read after such
	// a wait are a later instant's than the sweep's time.
	for _, ch := range chans {
		if ch.idx == 0 {
			ch.vm.wasBusy, ch.vm.busy = ch.vm.busy, false
			ch.vm.wasQueued, ch.vm.queued = ch.vm.queued, false
		}
		ch.readMarkers()
	}
	busyVMs := 0
	for _, ch := range chans {
		b.unseen, b.now1 = ch.peek(b.unseen, b.now1)
		ch.vm.queued = ch.vm.queued || ch.pending
		if ch.busy && !ch.vm.busy {
			ch.vm.busy = true
			busyVMs++
		}
	}
	overlapped := b.credit(now - b.lastSweep)
	b.traceTurn(now, overlapped || busyVMs >= 2, chans)
	b.prevSweep = b.lastSweep
	b.running, b.lastSweep = b.running[:0], now
	for _, ch := range chans {
		var seq uint64
		out, seq = ch.sweep(out)
		if seq != 0 {
			b.running = append(b.running, runRef{ch, seq})
			if l, ok := ch.overdue(seq); ok {
				b.late = append(b.late, l)
			}
		}
	}
	if b.hops != nil {
		if b.delivered = len(out) != 0; b.delivered {
			b.hops.set.add(hopDeliveringSweep, b.now()-now)
		}
	}
	return out
}

// rest starts the next sweep's interval at now, with nothing running at
// its start: the completer calls it while nothing is outstanding (both are
// the completer's own).
func (b *Backend) rest(now int64) { b.running, b.lastSweep = b.running[:0], now }

// credit splits dt, the interval since the last sweep, between the
// commands that ran in it (processor sharing). What a sweep knows is what
// ran at its instant, at both ends of the interval: those seen running at
// the last sweep (b.running) and those running now (b.now1); a change
// between the two came somewhere in the interval, so each end stands for
// half of it (the trapezoid rule). Each half is split evenly between the
// VMs running at its end (the GPU time-slices between contexts and runs
// one at a time), a VM's part evenly between its channels running then
// (its streams run at once in its context: its part is the union of their
// time, counted once), and a channel's credit between the commands it ran
// in the interval: those two and the ones that started and ended between
// the sweeps unseen. A VM running at neither end is credited nothing, not
// the whole interval for a command that ran somewhere in it: the sweeps
// sample what runs, and a sample's time whether or not anything ran; so an
// interval that a late sweep made long (the completer descheduled, a
// collection) bills what ran at its ends, not the launch gaps and idle
// time in it. A command's credits add up to its GPU time
// (Completion.GPUNs), and the bills of one interval, with the switch
// overhead taken from a half at whose end several VMs ran (f of it, see
// switchcost.go), to the part of it in which something ran, however many
// VMs ran. While tracing is on and a VM that ran has its tracer running
// beside another VM, each VM's part is what its tracer says
// (tracedInterval: its count, at most the interval at a time), those whose tracers do not run
// share what is left less the switches (splitUntraced), and the overhead is
// what they leave: within one interval the parts can come to more than it,
// a count landing late, and the overhead is kept signed.
func (b *Backend) credit(dt int64) (overlapped bool) {
	if dt <= 0 || len(b.running)+len(b.now1) == 0 {
		return false
	}
	b.creditGen++
	gen := b.creditGen
	var vms [2]int
	b.ranVMs = b.ranVMs[:0]
	count := func(refs []runRef, end int) {
		for _, r := range refs {
			ch, v := r.ch, r.ch.vm
			if v.creditGen != gen {
				v.creditGen, v.creditChans = gen, [2]int{}
				b.ranVMs = append(b.ranVMs, v)
			}
			if ch.creditGen != gen {
				ch.creditGen, ch.creditCmds, ch.creditEnds = gen, 0, [2]bool{}
			}
			if v.creditChans[end] == 0 {
				vms[end]++
			}
			v.creditChans[end]++
			ch.creditEnds[end] = true
			if end == 0 || len(b.running) == 0 || !ch.ranAt(b.running, r.seq) {
				ch.creditCmds++ // the same command at both ends counts once
			}
		}
	}
	count(b.running, 0)
	count(b.now1, 1)
	for _, r := range b.unseen {
		if r.ch.creditGen == gen {
			r.ch.creditCmds++
		}
	}
	// half is what one end's VMs share: ends[end] a VM's part of it.
	// Where several VMs ran at an end, the GPU time-sliced between their
	// contexts: f of that half went to switching, which is nobody's
	// (switchcost.go), and the VMs share the rest; unless every VM that
	// ran had its tracer running (tracing.go), which says what each had.
	half := float64(dt) / 2
	overlapped = vms[0] >= 2 || vms[1] >= 2
	traced := b.traceOn && b.tracedInterval(gen, dt)
	f := b.overheadFraction()
	if traced {
		b.splitUntraced(half, f)
	}
	// even is what one end's VMs share evenly: the watchdog's clock
	// always, the bills where the interval is not traced.
	var even [2]float64
	for end := range 2 {
		even[end] = half
		if vms[end] >= 2 {
			even[end] = half * (1 - f)
			if !traced {
				b.switchOwed += half * f
			}
		}
	}
	evenPart := func(v *cudaVM, end int) float64 {
		if v.creditChans[end] == 0 {
			return 0
		}
		return even[end] / float64(vms[end])
	}
	vmPart := func(v *cudaVM, end int) float64 {
		if v.creditChans[end] == 0 {
			return 0
		}
		var carry float64
		if b.traceOn { // tracedInterval ran: what v counted before, where its count does not bill it (tracing.go)
			carry = v.atEnd(v.tc.carry, end)
		}
		if !traced {
			return evenPart(v, end) + carry
		}
		if !v.tc.fresh {
			// What the traced VMs left of the end's half, shared with
			// the others whose tracers did not run.
			return b.untracedPart[end] + carry
		}
		return v.atEnd(v.tc.part, end) // its part of the interval (tracedInterval)
	}
	chanCredit := func(ch *channel) float64 {
		var c float64
		for end := range 2 {
			if ch.creditEnds[end] {
				c += ch.vm.creditPart[end] / float64(ch.vm.creditChans[end])
			}
		}
		return c
	}
	give := func(r runRef, ran float64) {
		share := chanCredit(r.ch) / float64(r.ch.creditCmds)
		r.ch.mu.Lock()
		if it := r.ch.find(r.seq); it != nil {
			it.gpu += share
			it.ran += ran
		}
		r.ch.mu.Unlock()
	}
	// How the VMs' bills were made (Backend.BillKinds), and what they add
	// up to.
	var billed float64
	for _, v := range b.ranVMs {
		kind := billAlone
		switch {
		case traced && v.tc.fresh:
			kind = billTraced
		case overlapped || traced:
			kind = billEven
		}
		v.creditPart = [2]float64{vmPart(v, 0), vmPart(v, 1)}
		p := v.creditPart[0] + v.creditPart[1]
		v.billKinds[kind] += p
		billed += p
		v.quietRan(dt)
	}
	if traced {
		// What the bills left of the time something ran at the ends is
		// nobody's: the switches between contexts, and the time a context
		// held the GPU between its commands. Signed: a tracer's count
		// lands in steps of a microsecond or two, a sweep's interval is
		// about one, so an interval's counts come short of it as often as
		// past it.
		var busy float64
		for end := range 2 {
			if vms[end] > 0 {
				busy += half
			}
		}
		b.switchOwed += busy - billed
		b.tracedNs.Add(dt)
		if overlapped && dt <= countOverHalfNs && !b.carried && b.allTraced() {
			b.learnOverhead(busy, busy-billed)
		}
	}
	if b.switchOwed >= 1 {
		whole := math.Floor(b.switchOwed)
		b.switchNs.Add(int64(whole))
		b.switchOwed -= whole
	}
	// The watchdog's clock: a VM's channels run at once in its context,
	// so each running command has its VM's part of the half, not a part of
	// that; its even part, traced or not: a tracer's count is in the VM's
	// reach, and a VM that forged it must not stop its own clock.
	for _, r := range b.running {
		give(r, evenPart(r.ch.vm, 0))
	}
	for _, r := range b.now1 {
		ran := evenPart(r.ch.vm, 1)
		if len(b.running) != 0 && r.ch.ranAt(b.running, r.seq) {
			r.ch.mu.Lock()
			if it := r.ch.find(r.seq); it != nil {
				it.ran += ran
			}
			r.ch.mu.Unlock()
			continue // credited as running at the last sweep: its share covers both ends
		}
		give(r, ran)
	}
	for _, r := range b.unseen {
		if r.ch.creditGen == gen {
			give(r, 0)
		}
	}
	return overlapped
}

// ranAt reports whether refs (the commands running at the last sweep) has
// command seq of ch.
func (ch *channel) ranAt(refs []runRef, seq uint64) bool {
	for _, r := range refs {
		if r.ch == ch && r.seq == seq {
			return true
		}
	}
	return false
}

// readMarkers reads ch's markers for this sweep, end and start together
// right after the sweep took its time (kept for its sweep: what ran and
// ended is judged on one reading of both, so that starts and ends are seen
// equally late), and what the worker issued. The completer's alone: no
// lock (the words are atomic, and only the completer reads what it keeps).
func (ch *channel) readMarkers() {
	// The end first: a command whose end is read has its start read too.
	ch.peekEnd = ch.vm.blk.load(ch.base + offEnd)
	ch.peekStart = ch.vm.blk.load(ch.base + offStart)
	ch.peekIssued = ch.vm.blk.load(ch.base + offIssued)
}

// peek adds to unseen the commands of ch that ended since the last sweep
// by the markers readMarkers read, and were never seen running there (they
// ran in the interval the sweep credits), and to running the command that
// runs now, if any (the one ch.sweep reports).
func (ch *channel) peek(unseen, running []runRef) ([]runRef, []runRef) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.pending = len(ch.q) != 0
	ch.busy = ch.pending && ch.peekIssued > ch.peekEnd
	for k := range ch.q {
		it := &ch.q[k]
		if it.seq == 0 {
			continue // never went to a worker: it did not run
		}
		end := ch.peekEnd
		if it.w.dead.Load() {
			end = it.w.finalEnd[ch.idx] // as in sweep: its final markers
		}
		if it.seq > end {
			if it.w.dead.Load() {
				continue // a fresh worker's commands behind it may have ended
			}
			break // the stream runs in order: nothing behind it ended
		}
		if it.endAt == 0 && !it.seen && !it.unseenOnce {
			// Once: a command behind a THROTTLE that waits for its
			// code is not delivered at this sweep, and would be listed
			// (and credited) again at every sweep until then.
			it.unseenOnce = true
			unseen = append(unseen, runRef{ch, it.seq})
		}
	}
	if it := ch.runningNow(); it != nil {
		running = append(running, runRef{ch, it.seq})
	}
	return unseen, running
}

// runningNow is the command ch runs by the markers its peek read, both at
// once, or nil. ch.mu is held.
func (ch *channel) runningNow() *item {
	if it := ch.currentAt(ch.peekEnd); it != nil && ch.peekStart >= it.seq && it.seq != 0 {
		return it
	}
	return nil
}

// sweep delivers ch's due completions and reports the command it runs now
// (0 if none).
func (ch *channel) sweep(out []delivery) ([]delivery, uint64) {
	v := ch.vm
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.q) == 0 {
		return out, 0
	}
	// Starts and ends are timed at the sweep's instant, when it read the
	// markers it judges them by; not at a clock read of their own: a sweep
	// that delivers would be the longer for it, and the interval after a
	// delivery is what a short kernel's start is seen within (the start
	// comes a launch gap after the end the sweep found). ReadStatus notes
	// starts under the lock at its own later instant: an end is never
	// before its start.
	now := v.b.lastSweep
	closing := v.closing.Load()
	n := 0
	for ; n < len(ch.q); n++ {
		it := &ch.q[n]
		c := backend.Completion{Channel: ch.idx, Tag: it.tag, Op: it.op, Code: it.code}
		var record bool // the deliverer takes its THROTTLE record (delivery.record)
		var hop *item
		if it.seq != 0 {
			// Whether the worker ended first: then its markers are final,
			// as it left them, and they alone judge its commands. Not the
			// sweep's reading of them: that may be older than its death
			// (a command it ended after the reading would fail as lost),
			// and a fresh worker's markers go on past them.
			dead := it.w.dead.Load()
			end := ch.peekEnd
			if dead {
				end = it.w.finalEnd[ch.idx]
			}
			switch {
			case it.seq <= end:
				if it.endAt == 0 {
					// Never before its start: one ReadStatus noted under
					// the lock at its own later instant, or (never seen
					// running) its submission, which can come after the
					// sweep's instant and before its marker read.
					it.endAt = max(now, ch.startOf(it), 1)
				}
				code, stamped := ch.codeAt(it.seq)
				if !stamped && it.op == abi.OpThrottle {
					// The worker stamps a THROTTLE's code once its launch
					// call returned (issue), which a short kernel can end
					// before, and a worker descheduled in between stamps
					// it as late as it runs again. Its end without the
					// stamp is a launch that went through (one that failed
					// stamps its code before the worker queues the markers
					// that end it), but only the stamp says so: the VM's
					// kernels can write its markers too (doc.go, "Limits").
					// So it waits for the code while the worker lives,
					// which stamps it or ends (a sticky error, a crash, the
					// watchdog): its commands that did not complete then
					// fail as it left them, this one with them. Only a VM
					// that closes stops waiting, after recordWait (a
					// worker stopped for good must not hold up Close).
					switch {
					case dead:
						code = it.w.lostCode()
					case closing && now-it.endAt >= recordWait:
						code = abi.ErrShutdown
					default:
						goto stop // the next sweep
					}
				}
				c.Code = code
				if c.Code == abi.OK {
					// Its credits, zero included (no sweep saw it run: it
					// ran between two sweeps at which its VM ran nothing):
					// billed that, not its span.
					c.Start, c.End, c.GPUNs, c.GPUMeasured = ch.startOf(it), it.endAt, int64(it.gpu), true
					if it.startAt == 0 && !it.seen {
						// Never seen running: it ran between this sweep and
						// the one before, not since it was queued.
						c.Start = max(c.Start, min(v.b.prevSweep, c.End))
					}
					// Its ground-truth record, where one is kept, is the
					// deliverer's to take: it lands after the end marker,
					// and reading it here (a line the GPU wrote: a miss)
					// would lengthen the interval after a delivery, in
					// which the next short kernel's start is seen.
					record = it.op == abi.OpThrottle && (v.truth.keep.Load() || v.b.hops != nil)
					if v.b.hops != nil {
						hop = new(item)
						*hop = *it
					}
				}
				ch.lastEnd = it.endAt
			case dead:
				c.Code = it.w.lostCode()
			case closing:
				c.Code = abi.ErrShutdown
			default:
				goto stop
			}
		}
		out = append(out, delivery{vm: v, c: c, seen: it.endAt, seq: it.seq, record: record, hop: hop})
	}
stop:
	switch {
	case n == len(ch.q):
		// Everything went: the queue starts over at its array's start.
		clear(ch.q)
		ch.q = ch.qbuf[:0]
	case n > 0:
		clear(ch.q[:n]) // no worker kept alive by a delivered command
		ch.q = ch.q[n:]
	}
	if len(ch.q) == 0 {
		return out, 0
	}
	// Running at this sweep by the markers its peek read, both at once:
	// a start another reader (ReadStatus) saw after the peek is this
	// sweep's no more than an end that landed after it is, so neither end
	// of a command's credit is observed later than the other.
	if it := ch.runningNow(); it != nil {
		if it.seq != ch.startSeq { // else noted already
			ch.noteStart(it, now)
			// Its code slot into this processor's cache while it runs:
			// the worker wrote it when it issued the command, and the
			// sweep that finds its end then reads it without a miss.
			v.blk.load(v.blk.l.codeOff(ch.idx, it.seq) + codeStamp)
		}
		it.seen = true
		return out, it.seq
	}
	return out, 0
}

// current is the command ch's stream runs or will run next: the first in
// its queue whose end marker has not been written. The queue's head may
// have ended and wait for its THROTTLE's code (sweep) while the stream
// runs the commands behind it: those run, and are credited and seen
// running, as any other. Nil when every queued command has ended.
// The caller holds ch.mu.
func (ch *channel) current() *item {
	return ch.currentAt(ch.vm.blk.load(ch.base + offEnd))
}

// currentAt is current by an end marker already read.
func (ch *channel) currentAt(end uint64) *item {
	for k := range ch.q {
		if it := &ch.q[k]; it.seq > end {
			return it
		}
	}
	return nil
}

// find is the queued command seq, or nil once it was delivered. The
// caller holds ch.mu.
func (ch *channel) find(seq uint64) *item {
	for k := range ch.q {
		if ch.q[k].seq == seq {
			return &ch.q[k]
		}
	}
	return nil
}

// codeOf is the code the worker left in command seq's slot. It is there
// before the command's end marker, except a THROTTLE's that launched (the
// worker stamps it once the launch call returned: codeAt); a slot that
// says otherwise, or a code the worker cannot have written, fails the
// command.
func (ch *channel) codeOf(seq uint64) abi.ErrorCode {
	code, _ := ch.codeAt(seq)
	return code
}

// codeAt is codeOf, and whether the slot was stamped for seq (false:
// abi.ErrDevice, or a THROTTLE's code still on its way: sweep waits for
// it while the worker lives).
func (ch *channel) codeAt(seq uint64) (abi.ErrorCode, bool) {
	off := ch.vm.blk.l.codeOff(ch.idx, seq)
	if ch.vm.blk.load(off+codeStamp) != seq {
		return abi.ErrDevice, false
	}
	code := ch.vm.blk.load(off + codeValue)
	if code > uint64(abi.ErrShutdown) {
		return abi.ErrDevice, true
	}
	return abi.ErrorCode(code), true
}

// recordWait is how long a VM that closes waits for the code of a
// THROTTLE whose end marker is there (sweep).
const recordWait = 10_000_000

// recordLate is how long after a THROTTLE's end marker was seen its record
// may take to show before it counts as lost. Its writes and the marker's
// are posted one after the other by one GPU thread: they land within
// microseconds. The deliverer waits that long for it, holding up every
// VM's callbacks: where ground truth is kept (the bench, the GPU tests,
// the switch-overhead probes), never for sluiced's guests.
const recordLate = 1_000_000

// takeRecord adds THROTTLE seq's ground-truth record to its VM's truth
// log; the completer saw its end at seen. The record comes after the end
// marker: it waits for it, recordLate after seen at most (lost: the
// ground truth goes without it), and reports whether it came. Its slot is
// the channel's until the deliverer is done with it (readThrough).
func (ch *channel) takeRecord(seq uint64, seen int64) bool {
	blk := ch.vm.blk
	off := ch.base + blk.l.slotOff(seq)
	for i := 1; blk.load(off+24) != seq; i++ {
		if i%64 == 0 && ch.vm.b.now()-seen >= recordLate && blk.load(off+24) != seq {
			return false
		}
	}
	ch.vm.truth.add(int64(blk.load(off+8)), int64(blk.load(off+16)), int64(blk.load(off)))
	return true
}

// startOf is when it started: when its start marker was seen, or else (it
// ran between two sweeps) when its channel could last have started it.
func (ch *channel) startOf(it *item) int64 {
	if it.startAt != 0 {
		return it.startAt
	}
	return max(it.submitAt, ch.lastEnd)
}

// noteStart records when command it's start marker was first seen (it is
// the channel's current command, from current). ch.mu is held.
func (ch *channel) noteStart(it *item, now int64) {
	if it.seq == 0 || ch.startSeq == it.seq {
		return
	}
	if ch.vm.blk.load(ch.base+offStart) >= it.seq {
		ch.startSeq, ch.startAt = it.seq, now
		it.startAt = max(now, 1)
	}
}

// ReadStatus is the LoGA status read: the channels whose command's start
// marker is ahead of its end marker run, since that was first seen; the
// channels with work outstanding are active. A VM is one engine: the GPU
// time-slices between VMs' contexts, so the estimator splits a stretch
// where several VMs run evenly between them; channels of one VM in one
// stretch count once, under the first.
func (b *Backend) ReadStatus(st *backend.Status) {
	b.sweeping.RLock()
	defer b.sweeping.RUnlock()
	st.Running, st.Active = st.Running[:0], st.Active[:0]
	for _, ch := range *b.chans.Load() {
		ch.mu.Lock()
		if len(ch.q) == 0 {
			ch.mu.Unlock()
			continue
		}
		now := b.now() // under the lock, as the completer's: starts stay in order
		ref := backend.ChannelRef{VM: ch.vm.id, Channel: ch.idx}
		st.Active = append(st.Active, ref)
		if it := ch.current(); it != nil {
			ch.noteStart(it, now)
			if ch.startSeq == it.seq {
				st.Running = append(st.Running, backend.Running{ChannelRef: ref, Engine: ch.vm.engine, Since: ch.startAt})
			}
		}
		ch.mu.Unlock()
	}
	// After every start it saw, whoever noted it.
	st.Time = b.now()
}
