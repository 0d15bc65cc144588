// Package channel runs one channel of one VM on the host side: it reads the
// guest's put index, copies new command records out of the ring, validates
// the copies, forwards the valid ones to the backend, and publishes
// completions (get, fence, error) back into the channel's host-owned cache
// line.
//
// A channel is fed from two goroutines: Poll from the VM's doorbell goroutine
// and Complete from the backend's. One mutex (Channel.mu) guards the host
// state; it is never held while calling the backend, because a backend may
// complete a command synchronously inside Submit.
//
// What a channel keeps forwarded and not completed is bounded two ways: a
// window in records (SetWindow, a tuning knob), and the VM's Budget in
// estimated GPU time, shared by the VM's channels (SetBudget), which the
// scheduler sizes (mediator/internal/gate).
package channel

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// Submitter forwards a validated command to the GPU; it is the backend VM's
// Submit, bound to this channel.
type Submitter interface {
	Submit(channel int, cmd abi.Command, tag uint64) error
}

// Counters are a channel's running totals. Kernels counts THROTTLE and
// LAUNCH records completed without error.
type Counters struct {
	Doorbells uint64
	Commands  uint64
	Kernels   uint64
	Errors    uint64
	BusyNs    uint64
}

// UsageGen moves whenever one of the channel's usage counters does
// (Commands, BusyNs, Kernels, Errors); it costs one atomic load.
func (c *Channel) UsageGen() uint64 { return c.usageGen.Load() }

// SetUsageNotify has fn called after each completion is counted (outside
// the channel's lock; nil: none), so that a reader of the counters may
// sleep while nothing completes. fn must be cheap and must not block.
func (c *Channel) SetUsageNotify(fn func()) {
	if fn == nil {
		c.notify.Store(nil)
		return
	}
	c.notify.Store(&fn)
}

// Snapshot is the host's view of a channel, for stats.
type Snapshot struct {
	State      abi.ChannelState
	InFlight   uint32
	Error      abi.ErrorCode
	ErrorIndex uint32
	Counters
	Wakes uint64 // signals sent to a guest sleeping on its wake word
	// Dispatch and Turnaround are the records' latencies (latency.go).
	Dispatch, Turnaround Hist
}

// Waker signals vector of a guest peer: the VM's ivshmem server
// (ivshmem.Server.Notify).
type Waker interface {
	Notify(peer uint16, vector int) error
}

// Channel is the host side of one channel.
type Channel struct {
	idx    int
	region *shm.Region
	layout abi.Layout
	limits abi.Limits
	off    uint64 // descriptor offset, from the host's own layout
	gpu    Submitter

	pollMu sync.Mutex  // held by the one goroutine forwarding (batch is used outside mu)
	kick   atomic.Bool // more to forward: the goroutine holding pollMu goes round again
	// stalled is the channel's ticket while it waits for room in its
	// budget (Stalled), 0 once it reserved again.
	stalled atomic.Uint64

	// usageGen moves whenever a usage counter does (Commands, BusyNs,
	// Kernels, Errors): a reader polling usage skips a channel it has not
	// moved for with one atomic load (UsageGen).
	usageGen atomic.Uint64
	notify   atomic.Pointer[func()] // SetUsageNotify's

	mu        sync.Mutex
	get       uint32 // next record to complete
	submitted uint32 // next record to forward
	failed    bool
	failCode  abi.ErrorCode
	failIndex uint32
	failLocal bool   // the failing record never reached the backend: get must step over it
	resetAck  uint32 // last reset request acted on
	held      bool   // scheduler latch: doorbells noted, records not forwarded
	window    uint32 // most records forwarded and not completed; 0: no limit
	fence     uint64
	closed    bool
	frozen    bool // Freeze: completions are dropped
	counters  Counters
	// completedBase is what a predecessor completed (Resume), published
	// with counters.Commands in ChCompleted.
	completedBase uint64
	batch         []pending
	fences        []uint64     // FENCE values by ring slot, noted when forwarded
	budget        *Budget      // the VM's in-flight budget; nil: none
	costs         []int64      // what each record in flight was charged, by ring slot
	blind         []bool       // its cost estimated nothing (Budget.Unmeasured), by ring slot
	waker         Waker        // signals guests that armed the wake word; nil: none
	log           *slog.Logger // failures (SetLog); nil: none
	// failLogged is when the last failure was logged (now()), 0: never;
	// failsUnlogged the failures since that were not.
	failLogged    int64
	failsUnlogged uint64
	bellAt        int64   // the first doorbell not yet followed by a collection of everything (now()); 0: none
	since         []int64 // by ring slot: the doorbell time of the record in flight
	dispatch      Hist
	turn          Hist
	pub           hostLine // what publishLocked last wrote

	wakes atomic.Uint64 // signals sent
}

type pending struct {
	idx uint32
	cmd abi.Command
}

// New returns the host side of channel idx of a region laid out as l, whose
// host-owned line it initialises.
func New(idx int, region *shm.Region, l abi.Layout, lim abi.Limits, gpu Submitter) *Channel {
	c := newChannel(idx, region, l, lim, gpu)
	c.resetAck = region.Load32(c.off + abi.ChReset)
	// A guest may already have written put (an old region is served
	// again only by Resumed). Start from the guest's put so stale indices
	// are not executed.
	c.get = region.Load32(c.off + abi.ChPut)
	c.submitted = c.get
	c.publishLocked()
	return c
}

func newChannel(idx int, region *shm.Region, l abi.Layout, lim abi.Limits, gpu Submitter) *Channel {
	return &Channel{
		idx:    idx,
		region: region,
		layout: l,
		limits: lim,
		off:    l.ChannelOff(uint32(idx)),
		gpu:    gpu,
		batch:  make([]pending, 0, l.RingEntries),
		fences: make([]uint64, l.RingEntries),
		costs:  make([]int64, l.RingEntries),
		blind:  make([]bool, l.RingEntries),
		since:  make([]int64, l.RingEntries),
	}
}

// Index is the channel's index in its VM.
func (c *Channel) Index() int { return c.idx }

// SetLimits changes the limits the channel's next records are validated
// against (a THROTTLE longer than MaxThrottleNs fails with ErrTooLong).
func (c *Channel) SetLimits(lim abi.Limits) {
	c.mu.Lock()
	c.limits = lim
	c.mu.Unlock()
}

// SetWaker makes the channel honour its wake word (abi.FeatureWake): after
// publishing get or an error it signals, through w, the guest peer that
// armed the word, when the record it waits for completed or the channel
// failed. nil honours none.
func (c *Channel) SetWaker(w Waker) {
	c.mu.Lock()
	c.waker = w
	c.mu.Unlock()
}

// wakeCheck is what a publication of get or an error leaves to do once mu
// is released: look at the guest's wake word.
type wakeCheck struct {
	w      Waker
	get    uint32
	failed bool
}

// wakeLocked notes, right after publishLocked, what the wake word is to be
// checked against.
func (c *Channel) wakeLocked() wakeCheck {
	return wakeCheck{w: c.waker, get: c.get, failed: c.failed}
}

// wakeTries bounds the compare-and-swaps against a guest that rewrites its
// wake word meanwhile: only its own wakeup is at stake.
const wakeTries = 4

// wake signals the guest if its wake word says it sleeps until what was
// just published (abi.WakeDue), clearing the word's armed bit first so that
// one sleep gets one signal. It runs after the publication's stores (the
// loads here are sequentially consistent, as the guest's store of the word
// is: one of the two sides sees the other), outside mu: the signal is a
// write(2).
func (k wakeCheck) wake(c *Channel) {
	if k.w == nil {
		return
	}
	off := c.off + abi.ChWake
	for range wakeTries {
		word := c.region.Load64(off)
		peer, due := abi.WakeDue(word, k.get, k.failed)
		if !due {
			return
		}
		if c.region.CompareAndSwap64(off, word, word&^abi.WakeArmed) {
			c.wakes.Add(1)
			// A peer that left (or a word naming a peer that is not
			// there) is the guest's business: nothing to report.
			_ = k.w.Notify(peer, c.idx)
			return
		}
	}
}

// DefaultWindow is the mediator's default for SetWindow: no bound, as a GPU
// reading the ring itself would have. The stratified poller charges a VM
// held with work already forwarded correctly (bench/specs/hog-dfq.yaml,
// tuning.window), so the bound is a tuning knob, not a need.
const DefaultWindow = 0

// maxBatch bounds the records copied under mu at once, so a VM with a huge
// ring cannot hold up completions (which take mu) for long.
const maxBatch = 64

// Poll handles a doorbell: it forwards every new valid record the window
// lets through, stopping at the first invalid one, which fails the channel.
// If another goroutine is forwarding at the time, that one forwards the new
// records instead, and Poll returns at once.
//
// A doorbell on a held channel is told to the VM's budget's hook
// (BudgetHook.Knocked): turn arbitration gives the VM a turn on it.
func (c *Channel) Poll() { c.poll(true) }

// Stalled orders the channels of a VM that stopped for room in its
// in-flight budget and have reserved none since: a smaller ticket waited
// longer; 0 for a channel that is not waiting for room. A release serves
// the oldest first (gate), so that channels that share a budget take
// turns at the room a release gives rather than the first polled taking it
// every time.
func (c *Channel) Stalled() uint64 { return c.stalled.Load() }

// Put is the guest's put index as it is in shared memory now: a look
// without the lock, for a poller spinning on the ring (it may be garbage;
// forwarding validates it).
func (c *Channel) Put() uint32 { return c.region.Load32(c.off + abi.ChPut) }

// Found handles records a poller spinning on the ring found (Put moved)
// as a doorbell would, without counting a doorbell: the guest's own comes
// later and finds them forwarded. It reports whether records were
// forwarded: a put that moved over garbage, or on a failed or held
// channel, is no work for a spin to wait for more of.
func (c *Channel) Found() bool {
	c.mu.Lock()
	before := c.submitted
	c.mu.Unlock()
	c.poll(false)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.submitted != before
}

func (c *Channel) poll(doorbell bool) {
	c.mu.Lock()
	if doorbell {
		c.counters.Doorbells++
	}
	var t int64 // the clock read for the doorbell, which the first batch's collection uses too
	if c.bellAt == 0 {
		t = now()
		c.bellAt = t
	}
	var wk wakeCheck
	if c.handleResetLocked() {
		c.publishLocked()
		wk = c.wakeLocked()
	}
	held, b := c.held, c.budget
	c.mu.Unlock()
	wk.wake(c)
	if held && b != nil {
		b.knock()
		t = 0 // the knock may have taken a while (a turn's hand-over)
	}
	c.forwardAt(t)
}

// forward forwards until nothing more can go. One goroutine at a time does
// it; one arriving meanwhile sets kick and leaves, and the one forwarding
// goes round again, so no record is left behind by the race.
func (c *Channel) forward() { c.forwardAt(0) }

// forwardAt is forward with the time now, read by the caller just before
// (0: not read); the first batch takes it as its collection's time instead
// of reading the clock again (collectLocked).
func (c *Channel) forwardAt(t int64) {
	c.kick.Store(true)
	for c.kick.Load() {
		if !c.pollMu.TryLock() {
			return // the holder sees kick after it unlocks
		}
		c.kick.Store(false)
		for n := maxBatch; n == maxBatch; t = 0 {
			n = c.forwardBatch(t)
		}
		c.pollMu.Unlock()
	}
}

// forwardBatch copies, validates and forwards up to maxBatch records (fewer
// if the window is nearly full) and reports how many it forwarded. t is
// the time now if the caller just read it, else 0.
func (c *Channel) forwardBatch(t int64) int {
	c.mu.Lock()
	if c.failed || c.held || c.closed {
		c.mu.Unlock()
		return 0
	}
	limit := uint32(maxBatch)
	if c.window > 0 {
		limit = min(limit, c.window-min(c.submitted-c.get, c.window))
	}
	if limit == 0 {
		c.mu.Unlock()
		return 0
	}
	batch := c.collectLocked(limit, t)
	c.publishLocked()
	var wk wakeCheck
	if c.failed {
		wk = c.wakeLocked() // a record failed validation: a sleeping guest must see it
	}
	c.mu.Unlock()
	wk.wake(c)

	for i := range batch {
		if err := c.gpu.Submit(c.idx, batch[i].cmd, uint64(batch[i].idx)); err != nil {
			c.rejectUnsent(batch[i].idx, abi.CodeOf(err))
			return 0
		}
	}
	if len(batch) == int(limit) && limit < maxBatch {
		return maxBatch // the window filled: go round in case completions freed room meanwhile
	}
	return len(batch)
}

// SetWindow bounds how many records the channel keeps forwarded to the
// backend and not completed (0: no bound). The rest wait in the guest's ring
// and go as completions make room, so a VM the scheduler holds stops within
// a few commands instead of after everything it queued.
func (c *Channel) SetWindow(n uint32) {
	c.mu.Lock()
	c.window = n
	c.mu.Unlock()
	c.forward()
}

// SetBudget makes the channel share the VM's in-flight budget b (nil: none).
// Set it before the channel forwards anything: records in flight when it
// changes are refunded to the budget that was charged for them only if
// that is still the channel's.
func (c *Channel) SetBudget(b *Budget) {
	c.mu.Lock()
	c.budget = b
	c.mu.Unlock()
}

// Budget is the VM's in-flight budget the channel shares (nil: none).
func (c *Channel) Budget() *Budget {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.budget
}

// collectLocked copies and validates the records between submitted and put,
// advancing submitted over the valid ones. It stops before a record that
// does not fit in the VM's budget. t is the time now if the caller just
// read it (0: collectLocked reads it when there are records).
func (c *Channel) collectLocked(limit uint32, t int64) []pending {
	put := c.region.Load32(c.off + abi.ChPut)
	n, code := abi.CheckPut(put, c.get, c.submitted, c.layout.RingEntries)
	n = min(n, limit)
	if code != abi.OK {
		// Nothing to step over: the guest's indices are broken, and only a
		// reset (get = put) repairs them.
		c.counters.Errors++
		c.usageGen.Add(1)
		c.failLocked(c.submitted, code, false)
		return nil
	}
	batch := c.batch[:0]
	if n == 0 { // nothing to collect: no clock read
		if c.submitted == put {
			c.bellAt = 0
		}
		return batch
	}
	var rec abi.Record
	if t == 0 {
		t = now()
	}
	bell := c.bellAt
	if bell == 0 || bell > t {
		bell = t // no doorbell: from now
	}
	defer func() {
		if c.submitted == put {
			c.bellAt = 0 // all collected; what is published later waits from its own doorbell
		}
	}()
	for range n {
		i := c.submitted
		c.region.CopyOut(rec[:], c.layout.RecordOff(uint32(c.idx), i))
		cmd, code := abi.DecodeCommand(&rec, c.layout, c.limits)
		if code != abi.OK {
			c.counters.Errors++
			c.usageGen.Add(1)
			c.failLocked(i, code, true)
			break
		}
		if c.budget != nil {
			cost, known := c.budget.cost(&cmd)
			if !c.budget.reserveOrWait(c, cost, !known) {
				break // forwarded again when a completion frees room
			}
			c.costs[i&(c.layout.RingEntries-1)] = cost
			c.blind[i&(c.layout.RingEntries-1)] = !known
		}
		if cmd.Op == abi.OpFence {
			c.fences[i&(c.layout.RingEntries-1)] = cmd.Value
		}
		batch = append(batch, pending{idx: i, cmd: cmd})
		c.since[i&(c.layout.RingEntries-1)] = bell
		c.dispatch.observe(t - bell)
		c.submitted++
	}
	return batch
}

// rejectUnsent fails a record the backend refused (and every record of the
// batch after it, which was never sent): submitted rolls back to it.
func (c *Channel) rejectUnsent(idx uint32, code abi.ErrorCode) {
	c.mu.Lock()
	var refund, blind int64
	for i := idx; i != c.submitted; i++ {
		refund += c.costs[i&(c.layout.RingEntries-1)]
		c.costs[i&(c.layout.RingEntries-1)] = 0
		if c.blind[i&(c.layout.RingEntries-1)] {
			blind++
			c.blind[i&(c.layout.RingEntries-1)] = false
		}
	}
	b := c.budget
	var wk wakeCheck
	defer func() {
		wk.wake(c)
		if b != nil {
			b.refund(refund, blind) // after mu: it may forward the VM's channels
		}
	}()
	defer c.mu.Unlock()
	c.submitted = idx
	c.counters.Errors++
	c.usageGen.Add(1)
	if c.failed && c.failLocal && int32(c.failIndex-idx) > 0 {
		// A later record of the batch had failed validation; the refused
		// one comes first, so it is the channel's failure now.
		c.failed = false
	}
	c.failLocked(idx, code, true)
	c.publishLocked()
	wk = c.wakeLocked()
}

// failLocked records the channel's first failure. local means the record
// never reached the backend, so no completion will advance get past it.
func (c *Channel) failLocked(idx uint32, code abi.ErrorCode, local bool) {
	if c.failed {
		return
	}
	c.failed, c.failCode, c.failIndex, c.failLocal = true, code, idx, local
	// It forwards nothing until its reset: nothing of it waits for room,
	// and a ticket kept would put it first in every release (Stalled).
	c.stalled.Store(0)
	c.logFailureLocked(idx, code)
	c.stepOverFailureLocked()
}

// failLogEvery bounds a channel's failure lines: a guest that fails and
// resets its channel in a loop gets one line a second, with the count of
// the failures not logged since.
const failLogEvery = int64(time.Second)

// SetLog makes the channel log its failures on log (nil: none).
func (c *Channel) SetLog(log *slog.Logger) {
	c.mu.Lock()
	c.log = log
	c.mu.Unlock()
}

// logFailureLocked logs a failure, at most one line each failLogEvery.
func (c *Channel) logFailureLocked(idx uint32, code abi.ErrorCode) {
	if c.log == nil {
		return
	}
	t := now()
	if c.failLogged != 0 && t-c.failLogged < failLogEvery {
		c.failsUnlogged++
		return
	}
	c.log.Warn("channel failed", "channel", c.idx, "error", code.String(), "record", idx, "not_logged_since", c.failsUnlogged)
	c.failLogged, c.failsUnlogged = t, 0
}

// stepOverFailureLocked advances get over a locally failed record once
// everything before it has completed.
func (c *Channel) stepOverFailureLocked() {
	if c.failLocal && c.get == c.failIndex && c.submitted == c.failIndex {
		c.get++
		c.submitted++
		c.failLocal = false
	}
}

// Completion is what the backend reports for one record.
type Completion struct {
	Index  uint32
	Op     abi.Opcode
	Code   abi.ErrorCode
	BusyNs int64
}

// Complete publishes one record's completion. Backends complete a channel's
// records in order.
//
// With a window, Complete forwards what waited for the room it frees, so it
// may call the backend's Submit (which the backend contract allows).
func (c *Channel) Complete(cp Completion) {
	c.mu.Lock()
	if c.frozen { // handed over: the successor runs the record again
		c.mu.Unlock()
		return
	}
	if cp.Index != c.get {
		// A backend completing out of order is a bug on the host side;
		// fail loudly in the channel rather than corrupting indices.
		c.failLocked(cp.Index, abi.ErrDevice, false)
	}
	slot := cp.Index & (c.layout.RingEntries - 1)
	cost := c.costs[slot]
	c.costs[slot] = 0
	var blind int64
	if c.blind[slot] {
		blind = 1
		c.blind[slot] = false
	}
	if since := c.since[slot]; since != 0 {
		c.turn.observe(now() - since)
		c.since[slot] = 0
	}
	c.get = cp.Index + 1
	c.counters.Commands++
	c.usageGen.Add(1)
	if cp.BusyNs > 0 {
		c.counters.BusyNs += uint64(cp.BusyNs)
	}
	switch {
	case cp.Code != abi.OK:
		c.counters.Errors++ // usageGen moved with Commands, above
		c.failLocked(cp.Index, cp.Code, false)
	case cp.Op == abi.OpThrottle || cp.Op == abi.OpLaunch:
		c.counters.Kernels++
	case cp.Op == abi.OpFence:
		c.fence = c.fences[cp.Index&(c.layout.RingEntries-1)]
	}
	c.stepOverFailureLocked()
	c.handleResetLocked()
	c.publishLocked()
	wk := c.wakeLocked()
	more := c.window > 0 && !c.held && !c.failed && c.submitted-c.get < c.window
	b := c.budget
	c.mu.Unlock()
	if fn := c.notify.Load(); fn != nil {
		(*fn)()
	}
	if b != nil {
		if cp.Code == abi.OK {
			b.measured(cp.Op, cp.BusyNs)
		}
		b.completed(cp.BusyNs)
		b.refund(cost, blind) // forwards the VM's channels that waited for room
	}
	// After the budget's books: a guest woken by the signal that asks the
	// host for its VM's state finds the completion counted.
	wk.wake(c)
	if more {
		c.forward() // room in the window: forward what waits (the contract lets Complete call Submit)
	}
}

// handleResetLocked acts on a guest's reset request once nothing is in
// flight: records not forwarded are dropped and the error cleared. It
// reports whether it acted.
func (c *Channel) handleResetLocked() bool {
	req := c.region.Load32(c.off + abi.ChReset)
	if req == c.resetAck || c.submitted != c.get {
		return false
	}
	put := c.region.Load32(c.off + abi.ChPut)
	c.get, c.submitted = put, put
	c.failed, c.failCode, c.failIndex, c.failLocal = false, abi.OK, 0, false
	c.resetAck = req
	c.stalled.Store(0) // what waited for room is dropped
	return true
}

// SetHeld latches (true) or releases (false) the channel's doorbells. A
// released channel must be polled to forward what arrived meanwhile.
func (c *Channel) SetHeld(held bool) {
	c.mu.Lock()
	c.held = held
	c.publishLocked()
	c.mu.Unlock()
}

// Pending reports whether the guest has written records the host has not
// forwarded yet (a held channel's latched work). It reads only put, and a
// guest lying about it gains nothing: a held VM with pending work counts as
// active, which keeps it in the fair-share computation.
func (c *Channel) Pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed || c.closed {
		return false
	}
	return c.region.Load32(c.off+abi.ChPut) != c.submitted
}

// Close stops forwarding; completions still publish.
func (c *Channel) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// Snapshot returns the channel's state and counters.
func (c *Channel) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Snapshot{State: c.stateLocked(), InFlight: c.submitted - c.get, Counters: c.counters, Wakes: c.wakes.Load(),
		Dispatch: c.dispatch, Turnaround: c.turn}
	if c.failed {
		s.Error, s.ErrorIndex = c.failCode, c.failIndex
	}
	return s
}

func (c *Channel) stateLocked() abi.ChannelState {
	switch {
	case c.failed:
		return abi.ChannelFailed
	case c.held:
		return abi.ChannelHeld
	case c.submitted != c.get:
		return abi.ChannelBusy
	}
	return abi.ChannelIdle
}

// hostLine is what publishLocked last wrote to the channel's host-owned
// line (valid: it wrote it at all since the channel was made or told to
// Republish).
type hostLine struct {
	valid     bool
	code      abi.ErrorCode
	index     uint32
	fence     uint64
	completed uint64
	state     abi.ChannelState
	resetAck  uint32
	get       uint32
}

// publishLocked writes the host-owned line: the fields that changed since
// the last publication, each an atomic store. get goes last: a guest that
// sees get advance also sees the error and fence that go with it.
//
// Only what changed: the guest polls this line while it waits, so every
// store takes the cache line back from the guest's core (and a
// sequentially consistent store waits for it); a NOP used to cost two
// publications of seven stores each, where four stores say what changed.
// The host never reads the line back, so a guest that scribbles on it
// misleads only itself until the field changes again or another guest
// joins (Republish).
func (c *Channel) publishLocked() {
	r, o, p := c.region, c.off, &c.pub
	code, idx := abi.OK, uint32(0)
	if c.failed {
		code, idx = c.failCode, c.failIndex
	}
	state := c.stateLocked()
	all := !p.valid
	// A guest that sees a non-zero error must see its index: the index
	// goes first when an error is set, last when it is cleared.
	if code != abi.OK {
		store32(r, o+abi.ChErrorIndex, &p.index, idx, all)
		store32(r, o+abi.ChError, (*uint32)(&p.code), uint32(code), all)
	} else {
		store32(r, o+abi.ChError, (*uint32)(&p.code), uint32(code), all)
		store32(r, o+abi.ChErrorIndex, &p.index, idx, all)
	}
	if all || p.fence != c.fence {
		r.Store64(o+abi.ChFence, c.fence)
		p.fence = c.fence
	}
	if done := c.completedBase + c.counters.Commands; all || p.completed != done {
		r.Store64(o+abi.ChCompleted, done)
		p.completed = done
	}
	store32(r, o+abi.ChState, (*uint32)(&p.state), uint32(state), all)
	store32(r, o+abi.ChResetAck, &p.resetAck, c.resetAck, all)
	store32(r, o+abi.ChGet, &p.get, c.get, all)
	p.valid = true
}

// store32 stores v at off unless *last says it is there already (and not
// all), and notes it in *last.
func store32(r *shm.Region, off uint64, last *uint32, v uint32, all bool) {
	if all || *last != v {
		r.Store32(off, v)
		*last = v
	}
}

// Republish writes the whole host-owned line again, as the channel's state
// has it: a guest joining the VM sees no scribbles of an earlier guest on
// it.
func (c *Channel) Republish() {
	c.mu.Lock()
	c.pub.valid = false
	c.publishLocked()
	c.mu.Unlock()
}
