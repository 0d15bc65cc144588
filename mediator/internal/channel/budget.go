package channel

import (
	"sync"
	"sync/atomic"

	"github.com/sluice-gpu/sluice/api/abi"
)

// A Budget bounds the GPU time one VM keeps forwarded to the backend and not
// completed (queued or running on the device), over all its channels. A hold
// stops new doorbells; the budget is what makes it bind the work forwarded
// before: a held VM's GPU use ends within its budget of the hold.
//
// The bound is in estimated GPU time, not in commands, so ten 10 µs kernels
// and one 100 µs kernel weigh the same. Each command is charged its cost
// (Cost) when it is forwarded and refunded when it completes. A channel
// forwards a command only if the VM has nothing in flight or the command
// fits in what is left of the limit: a VM always has at least one command
// in flight (progress is guaranteed, however long the command), and never
// more than its limit of estimated time beyond that one. A channel stopped
// for room waits and is forwarded again by the completion that frees it.
//
// # The estimate
//
// THROTTLE carries its duration; NOP, FENCE and FREE cost ControlCostNs.
// Every other command (LAUNCH, MEMSET, COPY, ALLOC, LOAD_MODULE) costs the
// VM's work estimate, learned from the busy time of its completed LAUNCH,
// MEMSET and COPY commands (what the backend measured, the time usage is
// billed from):
//
//   - before any was measured, a work command costs the whole limit: it goes
//     alone;
//   - a measurement above the estimate replaces it at once; one below
//     lowers it by 1/EstimateFall of the difference;
//   - the estimate used is at least 1/PeakRatio of the longest command
//     measured in the current and the last scheduling period (Roll).
//
// What a hostile guest can do to it: alternating short and very long
// kernels keeps the estimate at 7/8 of the long one or more, so its time in
// flight stays within 8/7 of the limit. Lowering the estimate with many
// short kernels and then sending long ones gets at most PeakRatio times the
// limit in flight while a long one was measured in the last one or two
// periods. A guest that runs nothing longer than s for a whole period can
// then have limit × L / s in flight once (L its long kernels' length):
// accounting charges that time, and dfq holds the VM until the others have
// caught up, so its share over time is unchanged; what the others pay is
// latency, at most once per period of good behaviour. Only a backend limit
// on a command's length bounds L.
//
// # Turns
//
// Under turn arbitration (mediator/internal/gate) the budget is also how the
// gate sees a VM's work on the GPU: InFlight is zero exactly when nothing of
// the VM is forwarded and not completed, the hook's Drained is called by the
// completion that brings it there, and Knocked by a doorbell on a held
// channel. A deadline (SetDeadline) admits a command only while the work
// ahead of it ends before the deadline (or nothing is in flight): the turn
// holder's last part of its quantum queues no further than one command past
// the quantum's end, and its queue does not run dry before it. EndBound tells when the
// latched holder's last work ends at the latest (its costs counted from the
// last completion), and Progress is called at each completion while the
// gate watches it, so that the next holder's commands can be queued behind
// that work before it ends (the gate's hand-off); Unmeasured counts the
// commands in flight whose cost is no estimate, behind which that bound
// bounds nothing. Starts and DrainedAt tell when InFlight last moved from
// and to zero: the gate learns from them how long a VM thinks between a
// completion and its next command (its anticipation).
//
// Under arbitration auto the budget also counts the time the VM had work
// outstanding (Track, Occupancy: occupancy.go), at InFlight's transitions
// from and to zero and the gate's SetWaiting.
//
// The fast path is one compare-and-swap per command forwarded and one atomic
// add per command completed; the mutex is taken only by a channel that
// found no room and by the completion that wakes it. Lock order: a
// channel's mu, then Budget.mu. The hook is called with neither held.
type Budget struct {
	limit    atomic.Int64 // ns; 0: no bound
	queued   atomic.Int64 // estimated ns forwarded and not completed
	est      atomic.Int64 // the work estimate, ns; 0: nothing measured yet
	peak     atomic.Int64 // longest work command measured this period
	lastPeak atomic.Int64 // ... in the last period
	stalls   atomic.Uint64
	stallSeq atomic.Uint64 // tickets of Channel.Stalled
	waiting  atomic.Bool   // waiters is not empty
	busy     atomic.Int64  // busy time of every completed command, ns
	longest  atomic.Int64  // longest busy time of a completed command, decaying (Longest)
	deadline atomic.Int64  // the limit is at most deadline − now; 0: none
	now      atomic.Pointer[func() int64]
	hook     atomic.Pointer[BudgetHook]
	mark     atomic.Int64  // when what is in flight began to run at the latest (EndBound)
	watch    atomic.Bool   // the hook's Progress is called at each completion
	blind    atomic.Int64  // commands in flight whose cost estimates nothing (Unmeasured)
	starts   atomic.Uint64 // InFlight's moves from zero (Starts)
	startAt  atomic.Int64  // when the last one was, on the clock
	drainAt  atomic.Int64  // when InFlight last moved to zero, on the clock (DrainedAt)

	mu      sync.Mutex
	waiters []*Channel

	occ occupancy // time with work outstanding, when tracked (Track)
}

// Tuning of the estimate (see Budget).
const (
	// ControlCostNs is the cost of a NOP, FENCE or FREE, and the least any
	// command costs: every command in flight keeps queued above zero.
	ControlCostNs = 1_000
	// EstimateFall: a measurement below the estimate lowers it by this
	// fraction of the difference.
	EstimateFall = 8
	// PeakRatio: the estimate is at least the recent peak over this.
	PeakRatio = 8
	// maxCost bounds a command's cost and a limit (about 18 minutes), so
	// that the costs of every record of every ring add up without overflow.
	maxCost = int64(1) << 40
)

// NewBudget returns a budget of limitNs (0: no bound).
func NewBudget(limitNs int64) *Budget {
	b := &Budget{}
	b.limit.Store(max(limitNs, 0))
	return b
}

// SetLimit changes the bound (0: none). A lower limit takes nothing back: the
// VM forwards nothing more until its work in flight is under it. A higher
// one forwards what waited.
func (b *Budget) SetLimit(ns int64) {
	ns = min(max(ns, 0), maxCost)
	old := b.limit.Swap(ns)
	if ns == 0 || (old != 0 && ns > old) {
		b.wake()
	}
}

// Limit is the bound in ns (0: none).
func (b *Budget) Limit() int64 { return b.limit.Load() }

// Roll starts a new scheduling period for the peak the estimate is held to.
func (b *Budget) Roll() {
	b.lastPeak.Store(b.peak.Swap(0))
	for {
		l := b.longest.Load()
		if b.longest.CompareAndSwap(l, l-l/LongestFall) {
			return
		}
	}
}

// LongestFall: Longest loses this fraction of itself at every period's
// end (Roll): a 500 ms command is still counted above 5 ms about 70
// periods (two seconds or more) on, so a VM that runs one such command per
// turn is known by it between its turns.
const LongestFall = 16

// Longest is the longest busy time of any one command (THROTTLE included)
// the VM completed, decaying by 1/LongestFall a period: how long the GPU is
// committed when this VM's next command starts, as far as its recent past
// tells (turns weigh it before passing the turn to the VM).
func (b *Budget) Longest() int64 { return b.longest.Load() }

// Cost is what cmd is charged while it is in flight, in ns.
func (b *Budget) Cost(cmd *abi.Command) int64 {
	c, _ := b.cost(cmd)
	return c
}

// cost is Cost, and whether it estimates the command's length: not for a
// work command before any was measured, which costs the whole limit (so
// that it goes alone) or, with no limit, ControlCostNs.
func (b *Budget) cost(cmd *abi.Command) (int64, bool) {
	switch cmd.Op {
	case abi.OpThrottle:
		return int64(min(max(cmd.DurationNs, ControlCostNs), uint64(maxCost))), true
	case abi.OpNop, abi.OpFence, abi.OpFree:
		return ControlCostNs, true
	}
	e := b.est.Load()
	if e == 0 {
		return max(b.limit.Load(), ControlCostNs), false // nothing measured: alone
	}
	return min(max(e, max(b.peak.Load(), b.lastPeak.Load())/PeakRatio, ControlCostNs), maxCost), true
}

// Unmeasured is how many of the VM's commands in flight cost no estimate of
// their length (work commands forwarded before any was measured): while
// one is, EndBound bounds nothing (turns hand off no turn behind it).
func (b *Budget) Unmeasured() int64 { return b.blind.Load() }

// BudgetHook is told of the events turn arbitration acts on (see Budget).
// Both are called without any channel's or the budget's lock held, and may
// hold, release and poll the VM's channels.
type BudgetHook struct {
	// Drained: a completion left nothing of the VM in flight.
	Drained func()
	// Knocked: a doorbell found one of the VM's channels held.
	Knocked func()
	// Progress: a completion while the budget is watched (SetWatch).
	Progress func()
}

// SetHook installs h (nil: none).
func (b *Budget) SetHook(h *BudgetHook) { b.hook.Store(h) }

// SetClock sets the clock EndBound and the deadline are on (nil: none;
// EndBound is then 0). With a clock the budget reads it once per
// completion, once per command forwarded while nothing was in flight and,
// while a deadline is set (SetDeadline), once per command forwarded while
// something was.
func (b *Budget) SetClock(now func() int64) {
	if now == nil {
		b.now.Store(nil)
		return
	}
	b.now.Store(&now)
}

// SetWatch makes every completion call the hook's Progress (on) or none
// (off): turns watch the latched holder while its last work drains.
func (b *Budget) SetWatch(on bool) { b.watch.Store(on) }

// EndBound is the latest time (on the clock of SetClock) by which the VM's
// work in flight ends, as far as the budget can tell: its commands run no
// longer than their costs, one after another, and nothing but the VM's
// work is on the GPU meanwhile (the turn holder's case). It is the time of
// the last completion, or of the last command forwarded while nothing was
// in flight, or a NotBefore, whichever is latest, plus InFlight: a command
// that runs now is counted whole from when it could have started at the
// latest, not from when it was forwarded. 0 without a clock or with
// nothing in flight. A command forwarded before any was measured counts
// its cost, which is no estimate of its length: while Unmeasured is above
// 0 the bound is not one.
func (b *Budget) EndBound() int64 {
	q := b.queued.Load()
	if q <= 0 || b.now.Load() == nil {
		return 0
	}
	return b.mark.Load() + q
}

// LastProgress is when the VM's work in flight last moved, on the clock of
// SetClock: its last completion, the last command forwarded onto nothing
// in flight, or a NotBefore, whichever is latest (EndBound's start); 0
// without a clock or before either.
func (b *Budget) LastProgress() int64 { return b.mark.Load() }

// NotBefore says that the VM's work in flight started no earlier than t
// (another VM's work ran on the GPU until then), for EndBound.
func (b *Budget) NotBefore(t int64) {
	for {
		m := b.mark.Load()
		if t <= m || b.mark.CompareAndSwap(m, t) {
			return
		}
	}
}

// stamp moves EndBound's start to now (a completion, or a command forwarded
// onto nothing in flight) and returns now (0 without a clock).
func (b *Budget) stamp() int64 {
	now := b.now.Load()
	if now == nil {
		return 0
	}
	t := (*now)()
	b.NotBefore(t)
	return t
}

// Starts counts InFlight's moves from zero (a command forwarded onto
// nothing in flight) and tells when the last one was, on the clock of
// SetClock (0 without one). With DrainedAt it tells the gate how long a VM
// had nothing in flight between two commands: its think time.
func (b *Budget) Starts() (n uint64, at int64) {
	n = b.starts.Load()
	return n, b.startAt.Load()
}

// DrainedAt is when InFlight last moved to zero (the completion that
// drained the VM), on the clock of SetClock; 0 without one or before.
func (b *Budget) DrainedAt() int64 { return b.drainAt.Load() }

// SetDeadline bounds the limit to deadline − now() (at least one command
// goes, as ever); deadline 0 removes the bound. now, when not nil, sets the
// clock deadline is on (SetClock). It forwards nothing: after a later
// deadline or none, Wake forwards what waited for room.
func (b *Budget) SetDeadline(deadline int64, now func() int64) {
	if now != nil {
		b.SetClock(now)
	}
	b.deadline.Store(max(deadline, 0))
}

// Wake forwards the channels that stopped for room (they may call the
// backend: call it without locks a completion takes).
func (b *Budget) Wake() {
	if b.waiting.Load() {
		b.wake()
	}
}

// InFlight is the estimated GPU time forwarded and not completed, ns: zero
// exactly when nothing of the VM is in flight.
func (b *Budget) InFlight() int64 { return b.queued.Load() }

// BusyNs is the busy time the backend reported for every command of the VM
// completed so far.
func (b *Budget) BusyNs() int64 { return b.busy.Load() }

// full reports whether q of work in flight leaves no room for cost more:
// beyond the limit, or reaching the deadline already. Work in flight is
// counted from when it runs at the latest (EndBound's start, not now: a
// command that runs now has run since then), and a command is admitted
// while what is ahead of it ends before the deadline, so that the queue
// does not run dry a submission's latency before the deadline (with
// nothing in flight the next command would go anyway, the GPU idle until
// it arrives); what the deadline admits runs past it by one command at
// most, as with nothing in flight.
func (b *Budget) full(q, cost int64) bool {
	if lim := b.limit.Load(); lim > 0 && q+cost > lim {
		return true
	}
	dl := b.deadline.Load()
	if dl == 0 {
		return false
	}
	now := b.now.Load()
	return now != nil && min(b.mark.Load(), (*now)())+q >= dl
}

// reserve charges cost if it fits: nothing in flight, no bound, or room.
func (b *Budget) reserve(cost int64) bool {
	for {
		q := b.queued.Load()
		if q > 0 && b.full(q, cost) {
			return false
		}
		if b.queued.CompareAndSwap(q, q+cost) {
			if q == 0 {
				t := b.stamp() // it runs from now at the latest (EndBound)
				b.startAt.Store(t)
				b.starts.Add(1)
				b.transition(t)
			}
			return true
		}
	}
}

// reserveOrWait is reserve for a channel that stops if it fails: the
// channel is registered to be forwarded again when room frees, and the
// reservation is tried once more, so that a completion racing with the
// registration is not missed. It reports whether cost was charged. A
// command whose cost is no estimate (blind) is counted in Unmeasured from
// before its reservation, so that Unmeasured never reads low.
//
// A channel that stops takes a ticket (Channel.Stalled) unless it holds
// one, and gives it up at its next reservation: the tickets order the
// VM's channels that wait for room, oldest first, for a release to serve
// in that order.
func (b *Budget) reserveOrWait(c *Channel, cost int64, blind bool) bool {
	if blind {
		b.blind.Add(1)
	}
	if b.reserve(cost) {
		c.stalled.Store(0)
		return true
	}
	b.mu.Lock()
	b.waiters = append(b.waiters, c)
	b.waiting.Store(true)
	b.mu.Unlock()
	if b.reserve(cost) {
		c.stalled.Store(0)
		return true // it stays registered: one spurious forward later
	}
	if blind {
		b.blind.Add(-1)
	}
	b.stalls.Add(1)
	if c.stalled.Load() == 0 {
		c.stalled.Store(b.stallSeq.Add(1))
	}
	return false
}

// refund gives back the cost of commands no longer in flight, blind of
// them counted in Unmeasured, and forwards the channels that waited for
// room. It must be called without a channel's mu held.
func (b *Budget) refund(cost, blind int64) {
	if cost != 0 {
		t := b.stamp() // what is left runs from now at the latest (EndBound)
		if b.queued.Add(-cost) == 0 {
			b.drainAt.Store(t)
			b.transition(t)
		}
	}
	if blind != 0 {
		b.blind.Add(-blind) // before the hook, which reads it
	}
	if b.waiting.Load() {
		b.wake()
	}
	if cost == 0 {
		return
	}
	h := b.hook.Load()
	switch {
	case h == nil:
	case b.queued.Load() == 0:
		if h.Drained != nil {
			h.Drained()
		}
	case b.watch.Load() && h.Progress != nil:
		h.Progress()
	}
}

// knock tells the hook that a doorbell found a channel held.
func (b *Budget) knock() {
	if h := b.hook.Load(); h != nil && h.Knocked != nil {
		h.Knocked()
	}
}

// completed adds a completed command's busy time to BusyNs and Longest.
func (b *Budget) completed(busyNs int64) {
	if busyNs <= 0 {
		return
	}
	b.busy.Add(busyNs)
	for {
		l := b.longest.Load()
		if busyNs <= l || b.longest.CompareAndSwap(l, busyNs) {
			return
		}
	}
}

// wake forwards every waiting channel.
func (b *Budget) wake() {
	b.mu.Lock()
	ws := b.waiters
	b.waiters = nil
	b.waiting.Store(false)
	b.mu.Unlock()
	for _, c := range ws {
		c.forward()
	}
}

// measured feeds the estimate with a completed command's busy time.
func (b *Budget) measured(op abi.Opcode, busyNs int64) {
	if busyNs <= 0 || (op != abi.OpLaunch && op != abi.OpMemset && op != abi.OpCopy) {
		return
	}
	busyNs = min(busyNs, maxCost)
	for {
		p := b.peak.Load()
		if busyNs <= p || b.peak.CompareAndSwap(p, busyNs) {
			break
		}
	}
	for {
		e := b.est.Load()
		n := busyNs
		if e != 0 && busyNs < e {
			n = e - (e-busyNs)/EstimateFall
		}
		if n == e || b.est.CompareAndSwap(e, n) {
			return
		}
	}
}

// BudgetStats is a budget's state, for stats.
type BudgetStats struct {
	LimitNs    int64  // the bound; 0: none
	InFlightNs int64  // estimated GPU time forwarded and not completed
	EstimateNs int64  // what a work command costs now (0: nothing measured yet)
	Stalls     uint64 // times a channel stopped for lack of room
}

// Stats returns the budget's state.
func (b *Budget) Stats() BudgetStats {
	s := BudgetStats{LimitNs: b.limit.Load(), InFlightNs: b.queued.Load(), Stalls: b.stalls.Load()}
	if b.est.Load() != 0 {
		s.EstimateNs = b.Cost(&abi.Command{Op: abi.OpLaunch})
	}
	return s
}
