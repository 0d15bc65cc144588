// Package gate applies the scheduler's decisions to VMs: a held VM's
// doorbells are latched (its channels stop forwarding; its commands wait in
// its rings, nothing is lost), and a released VM's channels are polled at
// once so that what arrived meanwhile is forwarded.
//
// A hold alone stops only new work: what a VM forwarded before it still
// runs. The gate therefore also sets each VM's in-flight budget
// (channel.Budget, shared by the VM's channels): the estimated GPU time the
// VM may keep forwarded and not completed, at least one command. With it a
// held VM's GPU use ends within a budget of the hold, and a co-runner's
// command waits behind at most a budget of the VM's work (and one command).
// The engine sizes it from the scheduler's period (SetBudget).
//
// # Arbitration
//
// Under arbitration driver the VMs the scheduler does not
// hold all forward at once, and the GPU's driver time-slices between their
// contexts. Under arbitration turns (SetTurns, turns.go) the gate also
// decides whose work is on the GPU: at most one VM at a time, the turn
// holder, has commands forwarded and not completed; every other VM is
// latched. A turn ends at a command boundary, when the holder has drained
// (nothing in flight) after having nothing left to do or after a quantum,
// or, with a hand-off threshold, when its last work ends within it (the
// next holder's first commands then queue behind that work, and the next
// turn waits for it); the scheduler picks the next holder
// (sched.Scheduler.NextTurn) and is charged the turn's exact GPU time
// (ChargeTurn). Turns engage only when a
// second VM has work: a VM alone keeps the turn, unlatched, for as long as
// it likes, and the first doorbell on an idle GPU gets the turn at once.
// A drained holder may keep the idle turn a moment, for its think time
// (anticipate.go). Under arbitration auto (SetTurns, auto.go) the gate
// switches between the two at each scheduling period's end (EndPeriod):
// turns while at least two VMs are backlogged under a policy that shares
// the GPU. Auto is the default where turns make sense (DefaultArbitration,
// engine.Default and engine.DefaultFor).
//
// Channels are polled (released work forwarded) after Gate.mu is released,
// in VM id order, so that a backend completing inside Submit may call back
// into the gate. Lock order: Gate.mu, then a channel's locks, then the
// scheduler's.
package gate

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sync"

	"github.com/sluice-gpu/sluice/mediator/internal/channel"
)

// Channel is what the gate needs of a channel (channel.Channel).
type Channel interface {
	SetHeld(held bool)
	Poll()
	Pending() bool
}

// Budgeted is a channel that shares its VM's in-flight budget
// (channel.Channel). The gate finds a VM's budget through its channels; a
// VM whose channels have none is not bounded.
type Budgeted interface {
	Budget() *channel.Budget
}

// Gate latches and releases VMs.
type Gate struct {
	mu      sync.Mutex
	vms     map[uint32][]Channel
	held    map[uint32]bool // the scheduler's holds
	ahead   map[uint32]bool // those of them for running ahead (ApplyAhead)
	latched map[uint32]bool // VMs whose channels are latched now
	budgets map[uint32]*channel.Budget
	limit   int64             // every VM's budget, ns; 0: none
	turns   *turnState        // nil: arbitration driver
	auto    *autoState        // nil: arbitration auto is not set
	polls   []pollEntry       // channels released under mu, polled after it
	wakes   []*channel.Budget // budgets given room under mu, woken after it
	unwaits []*channel.Budget // released under auto: not waiting once polled
	// resettle: the turns to settle again once polls made for a holder's
	// pending records are done (holderBusyLocked).
	resettle *turnState
}

// pollEntry is a released channel to poll once Gate.mu is released.
type pollEntry struct {
	vm uint32
	c  Channel
}

// New returns an empty gate; VMs' budgets are unbounded until SetBudget.
func New() *Gate {
	return &Gate{vms: map[uint32][]Channel{}, held: map[uint32]bool{}, latched: map[uint32]bool{},
		budgets: map[uint32]*channel.Budget{}}
}

// unlock releases mu and polls the channels released under it, in VM
// order (deterministic on a virtual timeline).
func (g *Gate) unlock() {
	polls, wakes, unwaits, rs := g.polls, g.wakes, g.unwaits, g.resettle
	g.polls, g.wakes, g.unwaits, g.resettle = nil, nil, nil, nil
	g.mu.Unlock()
	slices.SortStableFunc(polls, func(a, b pollEntry) int {
		return int(int64(a.vm) - int64(b.vm))
	})
	for _, p := range polls {
		p.c.Poll()
	}
	for _, b := range wakes {
		b.Wake()
	}
	for _, b := range unwaits {
		b.SetWaiting(false) // its latched work is forwarded now, or in flight
	}
	if rs != nil {
		g.event(rs) // what the polls forwarded, or that they forwarded nothing
	}
}

// Staller is a channel that says how long it has waited for room in its
// VM's budget (channel.Channel.Stalled).
type Staller interface {
	Stalled() uint64
}

// syncLocked latches or releases a VM's channels as the scheduler's hold
// and the turn say; a released VM's channels are polled after mu, those
// that waited for room in its budget first, oldest first (releaseOrder).
func (g *Gate) syncLocked(id uint32) {
	chans, ok := g.vms[id]
	if !ok {
		return
	}
	want := g.heldLocked(id) || (g.turns != nil && !g.turns.runs(id))
	if want == g.latched[id] {
		return
	}
	for _, c := range chans {
		c.SetHeld(want)
	}
	if !want {
		for _, c := range releaseOrder(chans) {
			g.polls = append(g.polls, pollEntry{id, c})
		}
	}
	if want {
		g.latched[id] = true
	} else {
		delete(g.latched, id)
	}
	g.waitingChangedLocked(id, want)
}

// releaseOrder is the order a release polls a VM's channels in: those
// waiting for room in its budget first, the longest waiting first, then
// the others in their order. A VM's channels share its budget, and under
// turns a release gives room for about a quantum's work: polled in one
// order every time, the first channel took that room at every turn and
// the others waited for seconds (the sim, a VM of four channels of 4 ms
// kernels two deep: channels 1-3 1-2 s at a time, p99 696 ms against a
// mean of 64 ms). Channels whose work all fits are polled as before.
func releaseOrder(chans []Channel) []Channel {
	type entry struct {
		c      Channel
		ticket uint64
	}
	es := make([]entry, len(chans))
	stalled := false
	for i, c := range chans {
		es[i] = entry{c, math.MaxUint64}
		if s, ok := c.(Staller); ok {
			if t := s.Stalled(); t != 0 { // read once: a forwarder may change it
				es[i].ticket, stalled = t, true
			}
		}
	}
	if !stalled {
		return chans // the usual release: nothing waited for room
	}
	slices.SortStableFunc(es, func(a, b entry) int { return cmp.Compare(a.ticket, b.ticket) })
	order := make([]Channel, len(es))
	for i, e := range es {
		order[i] = e.c
	}
	return order
}

// Add registers a VM's channels, released (latched under turns unless it
// gets the turn), under the gate's budget.
func (g *Gate) Add(vm uint32, chans []Channel) {
	g.mu.Lock()
	defer g.unlock()
	g.vms[vm] = slices.Clone(chans)
	for _, c := range chans {
		if bc, ok := c.(Budgeted); ok && bc.Budget() != nil {
			g.budgets[vm] = bc.Budget()
			g.budgets[vm].SetLimit(g.limit)
			break
		}
	}
	if g.auto != nil && g.auto.watching {
		g.trackLocked(vm)
	}
	g.hookLocked(vm)
	g.watchLocked() // a second VM: auto watches them all
	if g.turns != nil {
		g.syncLocked(vm)
		g.settleLocked()
	}
}

// SetBudget sets every VM's in-flight budget to ns (0: none) and starts a
// new period for the budgets' estimates (channel.Budget.Roll). The engine
// calls it at every period's end.
func (g *Gate) SetBudget(ns int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limit = max(ns, 0)
	for _, b := range g.budgets {
		b.Roll()
		b.SetLimit(g.limit)
	}
}

// Budget returns a VM's budget state; false if it has none.
func (g *Gate) Budget(vm uint32) (channel.BudgetStats, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, ok := g.budgets[vm]
	if !ok {
		return channel.BudgetStats{}, false
	}
	return b.Stats(), true
}

// BusyNowNs is the busy time of a VM's completed commands (channel.Budget's
// BusyNs) and, for the turn holder under turns, what its work
// in flight has run so far: from when it last moved (its last completion,
// or its forward onto nothing in flight: channel.Budget.LastProgress) to
// now, at most its estimate (InFlight). With one VM at a time on the GPU
// that time is the holder's, so the engine's period charges see a command
// that spans periods in each of them, not whole in the one it completes in
// (with periods shorter than a command, whole ones read as idle periods
// and saturated ones alternately). Not while a hand-off's tail runs before
// the holder's work. It may run ahead of the busy time the backend will
// report (a launch's latency): the engine's charges never go back, and
// the next ones catch up. False if the VM has no budget.
func (g *Gate) BusyNowNs(vm uint32) (int64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, ok := g.budgets[vm]
	if !ok {
		return 0, false
	}
	busy := b.BusyNs()
	if t := g.turns; t != nil && t.has && t.holder == vm && !t.tailed {
		if q := b.InFlight(); q > 0 {
			busy += min(max(t.cfg.Clock.Now()-b.LastProgress(), 0), q)
		}
	}
	return busy, true
}

// Remove forgets a VM, releasing it first (its channels are not polled).
// A turn it held ends.
func (g *Gate) Remove(vm uint32) {
	g.mu.Lock()
	defer g.unlock()
	if g.latched[vm] {
		for _, c := range g.vms[vm] {
			c.SetHeld(false)
		}
	}
	if b := g.budgets[vm]; b != nil && (g.turns != nil || g.auto != nil) {
		unhook(b)
		b.Track(nil)
		b.SetWaiting(false)
	}
	delete(g.vms, vm)
	delete(g.held, vm)
	delete(g.ahead, vm)
	delete(g.latched, vm)
	delete(g.budgets, vm)
	g.watchLocked() // one VM left alone: auto stops watching
	if g.turns != nil {
		delete(g.turns.think, vm)
		g.settleLocked()
	}
}

// Apply holds exactly the VMs in hold and releases every other VM that was
// held, forwarding its latched work (under turns: the turn holder's; a
// held holder's turn ends). Unknown ids are ignored.
func (g *Gate) Apply(hold []uint32) { g.ApplyAhead(hold, nil) }

// ApplyAhead is Apply where the holds of the VMs in ahead (a subset of
// hold) are for running ahead of the others (the scheduler's dfq), not for
// a limit (cap) or a turn of the policy's (timeslice). Those bind under the
// driver's arbitration, and not under turns, where the turn picker shares
// the GPU itself by the turns' charges: the two accounts disagree on when a
// VM ran (the picker charges a long kernel ahead, by its estimate, when its
// quantum ends; the scheduler sees it when it completes), and a VM the
// picker had already let the others catch up on was then held for the same
// lead, so that they ran twice (a VM of 200 ms kernels got 42% of an H100
// beside one of 1 ms kernels).
func (g *Gate) ApplyAhead(hold, ahead []uint32) {
	g.mu.Lock()
	defer g.unlock()
	want := make(map[uint32]bool, len(hold))
	for _, id := range hold {
		if _, ok := g.vms[id]; ok {
			want[id] = true
		}
	}
	fair := make(map[uint32]bool, len(ahead))
	for _, id := range ahead {
		if want[id] {
			fair[id] = true
		}
	}
	g.held, g.ahead = want, fair
	for _, id := range slices.Sorted(maps.Keys(g.vms)) {
		g.syncLocked(id)
	}
	if g.turns != nil {
		g.settleLocked()
	}
}

// heldLocked reports whether the scheduler's hold of id binds now: a hold
// for running ahead does not under turns (ApplyAhead).
func (g *Gate) heldLocked(id uint32) bool {
	return g.held[id] && (g.turns == nil || !g.ahead[id])
}

// Held reports whether the scheduler holds a VM now: a hold that binds
// (not one for running ahead under turns: ApplyAhead).
func (g *Gate) Held(vm uint32) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.heldLocked(vm)
}

// Waiting lists the latched VMs that have latched work, sorted: the
// scheduler must count them active, or they would never be released.
func (g *Gate) Waiting() []uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waitingLocked(0, false)
}

// waitingLocked lists the latched VMs with latched work, sorted, leaving
// out skip if skipping.
func (g *Gate) waitingLocked(skip uint32, skipping bool) []uint32 {
	var out []uint32
	for id := range g.latched {
		if (skipping && id == skip) || !g.pendingLocked(id) {
			continue
		}
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// pendingLocked reports whether a VM has records not forwarded yet.
func (g *Gate) pendingLocked(id uint32) bool {
	for _, c := range g.vms[id] {
		if c.Pending() {
			return true
		}
	}
	return false
}
