package gate

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluice-gpu/sluice/mediator/internal/channel"
)

// Arbitration names who decides whose context runs on the GPU.
type Arbitration string

// Arbitrations (see the package doc).
const (
	// ArbitrationDriver: every released VM forwards at once; the driver
	// time-slices between their contexts.
	ArbitrationDriver Arbitration = "driver"
	// ArbitrationTurns: one VM at a time has work on the GPU.
	ArbitrationTurns Arbitration = "turns"
	// ArbitrationAuto: turns while at least two VMs are backlogged,
	// driver otherwise, switched at scheduling-period boundaries (auto.go).
	ArbitrationAuto Arbitration = "auto"
)

// DefaultArbitration is the arbitration of a daemon or bench spec that
// names none, where turns make sense (engine.Default and DefaultFor keep
// the driver's elsewhere): auto, which runs turns where they bill exactly and share
// fairly (two or more VMs backlogged) and the driver's time slicing where
// that serves closed loops better.
const DefaultArbitration = ArbitrationAuto

// DefaultQuantum is the turn quantum of a zero setting: how long a turn
// lasts, once a second VM waits, before the holder is latched and drains.
// A turn switch without a hand-off (TurnConfig.HandoffNs) idles the GPU
// from the holder's last completion to the next holder's first command: on
// the sim nothing, on a GPU the completion's and the submission's latency,
// tens of µs, which 5 ms keeps near 1% of the GPU. A VM waiting for its turn waits at most a
// quantum and the holder's last command; 5 ms is a few driver time slices
// and well under a scheduling period (26 ms or more), so the scheduler's
// periods see several turns.
const DefaultQuantum = 5 * time.Millisecond

// ParseArbitration returns the arbitration named s; "" is the default.
func ParseArbitration(s string) (Arbitration, error) {
	switch a := Arbitration(s); a {
	case "":
		return DefaultArbitration, nil
	case ArbitrationDriver, ArbitrationTurns, ArbitrationAuto:
		return a, nil
	}
	return "", fmt.Errorf("parsing arbitration %q: want driver, turns or auto", s)
}

// Picker chooses the next turn's holder and is charged each turn
// (sched.Scheduler).
type Picker interface {
	NextTurn(candidates []uint32) (uint32, bool)
	ChargeTurn(id uint32, busyNs int64)
	// Behind reports, without changing anything, whether id would get
	// the turn before every one of others.
	Behind(id uint32, others []uint32) bool
}

// AnticipationDiv divides the quantum into how long a drained holder keeps
// an idle turn (see anticipateLocked): 625 µs at the default quantum.
const AnticipationDiv = 8

// OverrunQuanta is how many quanta a latched holder's work in flight may
// run on before the next VM gets the turn beside it (see overrunLocked): 15
// ms at the default quantum, so kernels up to three quanta long keep turns
// strict.
const OverrunQuanta = 3

// DefaultHandoff is the hand-off threshold of the daemon's and the bench's
// turns (TurnConfig.HandoffNs): the next holder is released when the
// latched holder's work in flight ends within 50 µs at the latest, by its
// estimate (channel.Budget.EndBound, which counts a command forwarded onto
// nothing in flight from its forward: the work left can be the threshold
// plus the command's launch latency). It is
// about what releasing a VM takes to put its first command on the GPU (the
// gate's settle, the channel's forward, the backend's submission and a GPU
// worker's wakeup: tens of µs), so that command is queued behind the
// holder's last one shortly before it ends; and it is well under a driver
// time slice (a millisecond or more), so that the GPU's scheduler, which
// switches to the queued context only when the holder's slice ends, ends
// the holder's last command inside its slice far more often than not.
const DefaultHandoff = 50 * time.Microsecond

// HandoffSetting is the threshold a daemon or bench setting names: 0 the
// default (DefaultHandoff), negative off (0 ns).
func HandoffSetting(d time.Duration) int64 {
	switch {
	case d < 0:
		return 0
	case d == 0:
		return int64(DefaultHandoff)
	}
	return int64(d)
}

// MaxHandoff bounds the hand-off threshold of a setting: well under a
// driver time slice (see DefaultHandoff).
const MaxHandoff = time.Millisecond

// Clock is the backend's time base for turns: Now in ns, and After calling
// fn delay ns from now (a Go timer on the wall clock, the simulator's
// timeline on a virtual one).
type Clock struct {
	Now   func() int64
	After func(delay int64, fn func())
	// Timer, when set, makes a reusable timer for fn: each call of reset
	// schedules fn delay ns from now in place of what the last one
	// scheduled (a time.Timer's Reset; fn may still run for the replaced
	// one if it was due). The anticipation uses it: a depth-1 VM is
	// anticipated at nearly every drain, and a timer made for each was one
	// per command (on the wall clock a goroutine each); a reused one fires
	// only when the holder does not come back. Nil: After, one armed at a
	// time (cheap on a virtual timeline).
	Timer func(fn func()) (reset func(delay int64))
}

// WallClock is a Clock on now whose timers are Go timers.
func WallClock(now func() int64) Clock {
	return Clock{
		Now: now,
		After: func(delay int64, fn func()) {
			time.AfterFunc(time.Duration(delay), fn)
		},
		Timer: func(fn func()) func(int64) {
			tm := time.AfterFunc(time.Hour, fn)
			tm.Stop()
			return func(delay int64) { tm.Reset(time.Duration(delay)) }
		},
	}
}

// TurnConfig configures arbitration turns.
type TurnConfig struct {
	QuantumNs int64 // 0: DefaultQuantum
	Picker    Picker
	Clock     Clock
	// Preempts says that the GPU time-slices between VMs' contexts
	// (backend.TimeSlices): only then does a turn pass beside a holder's
	// command that runs far past its turn (overrunLocked).
	Preempts bool
	// HandoffNs is the hand-off threshold (handoffLocked): a latched
	// holder whose work in flight ends within it at the latest passes the
	// turn before it drains, so that the next holder's first commands are
	// queued on the GPU behind its last ones. 0: off (the turn passes at
	// the drain).
	HandoffNs int64
	// Auto tunes arbitration auto (zero: the defaults).
	Auto AutoConfig
}

// Turn is the turn's state, for stats.
type Turn struct {
	Holder    uint32 // valid if Held
	Held      bool   // somebody holds the turn
	Contended bool   // another VM waits: the quantum runs
	Ending    bool   // the holder is latched and draining
	Turns     uint64 // turns granted so far
	// Overruns counts turns passed while the holder's work still ran
	// (overrunLocked), and hand-offs whose last work ran past the grace.
	Overruns uint64
	// Handoffs counts turns passed before the holder drained, its last
	// work ending within HandoffNs (handoffLocked).
	Handoffs  uint64
	QuantumNs int64
	HandoffNs int64
}

// turnState is the arbitration's state, guarded by Gate.mu.
type turnState struct {
	cfg       TurnConfig
	holder    uint32
	has       bool
	ending    bool  // holder latched, waiting for its drain
	contended bool  // a quantum runs
	deadline  int64 // the quantum's end
	base      int64 // the holder's BusyNs at the last charge
	pre       int64 // its work in flight charged ahead at the last charge
	gen       uint64
	granted   uint64
	// Anticipation (anticipate.go): the drained holder keeps the idle
	// turn a moment.
	idle       bool              // an anticipation runs
	waited     bool              // this idle spell had its anticipation
	idleEnd    int64             // when the anticipation ends
	antAt      int64             // when the armed anticipation timer fires; 0: none armed
	antReset   func(delay int64) // the reusable anticipation timer (Clock.Timer), made on first use
	idleFrom   int64             // when the idle turn began (the anticipation's start), or was last charged to
	idleStarts uint64            // the holder's budget's Starts then: it came back when they move
	idleNs     int64             // the holder's idle turn time not charged yet
	turnIdle   int64             // its idle turn time in this turn
	turnBusy   int64             // its BusyNs when it got the turn
	// The contended spell of the turn (usedLocked): since when the holder
	// is charged, and what it was charged since; how long of it another
	// VM's tail no longer waited for (owed) was on the GPU beside its work,
	// and since when it is now (shared).
	contFrom    int64
	contCharged int64
	sharedNs    int64
	sharedFrom  int64
	shared      bool
	// passed: the last holder lost its turn at its quantum's end for not
	// using it (usedLocked): the next turn goes to another VM that waits.
	passed  uint32
	passing bool
	// Pending records with nothing in flight (holderBusyLocked): the gate
	// polled the holder's channels for them once.
	polled     bool   // a poll for them was made
	pollStarts uint64 // the holder's budget's Starts then: unchanged, it forwarded nothing
	pend       bool   // a contended spell of records pending, nothing in flight runs
	pendFrom   int64  // since then
	think      map[uint32]*thinker
	// Overrun: a latched holder's work in flight ran past its grace.
	overrunArmed bool // the grace timer of this turn's latch runs
	overrun      bool // the grace is over: the turn passes beside that work
	overruns     uint64
	// Hand-off: the last holder passed the turn with its last work in
	// flight (the tail); no turn is granted until that drains.
	handoffAt int64 // when the armed hand-off timer fires; 0: none armed
	tail      uint32
	tailed    bool   // the tail is in flight
	tailGen   uint64 // the tail's generation (its grace timer's)
	tailBase  int64  // the tail VM's BusyNs at its hand-off's charge
	tailPre   int64  // its work in flight charged ahead then
	handoffs  uint64
	// owed holds the tails no longer waited for (tailGraceLocked) whose
	// netting is still to come: when the VM drains (settleOwedLocked), or
	// when it gets its next turn (grantOwedLocked).
	owed map[uint32]tailCharge
}

// tailCharge is what a hand-off's tail was charged: its VM's BusyNs then
// and its work in flight charged ahead by its estimate.
type tailCharge struct{ base, pre int64 }

// runs reports whether id may forward as far as the turn goes.
func (t *turnState) runs(id uint32) bool {
	return t.has && t.holder == id && !t.ending
}

// SetTurns switches the arbitration: turns with cfg, or back to driver
// (cfg ignored), or auto (auto.go: driver or turns with cfg, switched at
// EndPeriod; what is in force now stays until then). Switching to turns
// gives the turn to a VM with work (or to none: the next to ring gets it);
// switching to driver releases every VM the scheduler does not hold.
func (g *Gate) SetTurns(a Arbitration, cfg TurnConfig) error {
	if _, err := ParseArbitration(string(a)); err != nil {
		return err
	}
	if a != ArbitrationDriver && (cfg.Picker == nil || cfg.Clock.Now == nil || cfg.Clock.After == nil) {
		return fmt.Errorf("arbitration %s: a picker and a clock are needed", a)
	}
	if cfg.QuantumNs < 0 {
		return fmt.Errorf("arbitration %s: quantum %v: must not be negative", a, time.Duration(cfg.QuantumNs))
	}
	if cfg.HandoffNs < 0 {
		return fmt.Errorf("arbitration %s: hand-off %v: must not be negative", a, time.Duration(cfg.HandoffNs))
	}
	if err := cfg.Auto.check(); err != nil {
		return fmt.Errorf("arbitration %s: %w", a, err)
	}
	if cfg.QuantumNs == 0 {
		cfg.QuantumNs = int64(DefaultQuantum)
	}
	g.mu.Lock()
	defer g.unlock()
	if a == ArbitrationAuto {
		g.startAutoLocked(cfg)
		a = g.inForceLocked()
	} else {
		g.stopAutoLocked()
	}
	g.setTurnsLocked(a, cfg)
	return nil
}

// setTurnsLocked puts arbitration a (driver or turns) in force.
func (g *Gate) setTurnsLocked(a Arbitration, cfg TurnConfig) {
	g.closeTurnsLocked()
	for _, b := range g.budgets {
		unhook(b)
	}
	if a == ArbitrationDriver {
		g.turns = nil
	} else {
		g.turns = &turnState{cfg: cfg}
	}
	for id := range g.vms {
		g.hookLocked(id)
	}
	for id := range g.vms {
		g.syncLocked(id)
	}
	if g.turns != nil {
		g.settleLocked()
	}
}

// closeTurnsLocked nets what the turns in force charged ahead, as they
// end (a switch of arbitration: auto's at a period's end, or SetTurns): the
// holder is charged what it completed since its last charge less what was
// charged ahead for its work in flight then, and a hand-off's tail and the
// overruns still owed are netted as they stand. Each VM's charges are then
// its busy time; its work still in flight runs under what follows, charged
// nothing under the driver's arbitration (and charged in its turn under
// fresh turns). Dropped with the turns, those charges stayed at their
// estimates: a VM whose kernels ran past them was charged time it had not
// run (TestSwitchNetsWhatTurnsChargedAhead).
func (g *Gate) closeTurnsLocked() {
	t := g.turns
	if t == nil {
		return
	}
	if t.has && t.contended {
		if b := g.budgets[t.holder]; b != nil {
			t.cfg.Picker.ChargeTurn(t.holder, b.BusyNs()-t.base-t.pre)
		}
	}
	if t.tailed {
		if b := g.budgets[t.tail]; b != nil {
			g.netTailLocked(t.tail, b, tailCharge{t.tailBase, t.tailPre})
		}
	}
	for id, c := range t.owed {
		if b := g.budgets[id]; b != nil {
			g.netTailLocked(id, b, c)
		}
	}
}

// inForceLocked is the arbitration in force: driver or turns.
func (g *Gate) inForceLocked() Arbitration {
	if g.turns != nil {
		return ArbitrationTurns
	}
	return ArbitrationDriver
}

// Arbitration is the arbitration in force and the turn's state.
func (g *Gate) Arbitration() (Arbitration, Turn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.turns
	if t == nil {
		return ArbitrationDriver, Turn{}
	}
	return ArbitrationTurns, Turn{Holder: t.holder, Held: t.has, Contended: t.contended, Ending: t.ending,
		Turns: t.granted, Overruns: t.overruns, Handoffs: t.handoffs, QuantumNs: t.cfg.QuantumNs,
		HandoffNs: t.cfg.HandoffNs}
}

// unhook undoes hookLocked and what turns set on a budget.
func unhook(b *channel.Budget) {
	b.SetHook(nil)
	b.SetWatch(false)
	b.SetDeadline(0, nil)
	b.SetClock(nil)
}

// hookLocked makes a VM's budget tell the gate of its drains and knocks
// under turns, and of its knocks under auto (a latched VM's work waits).
func (g *Gate) hookLocked(id uint32) {
	b := g.budgets[id]
	if b == nil {
		return
	}
	knock := func() { g.knocked(id) }
	t := g.turns
	if t == nil {
		if g.auto != nil {
			b.SetHook(&channel.BudgetHook{Knocked: knock})
			if g.auto.watching {
				b.SetClock(g.auto.cfg.Clock.Now) // LastProgress, for the long commands
			}
		}
		return
	}
	fn := func() { g.event(t) }
	drained := func() { g.drained(t, id) }
	b.SetHook(&channel.BudgetHook{Drained: drained, Knocked: knock, Progress: fn})
	b.SetClock(t.cfg.Clock.Now)
}

// knocked is a doorbell on one of a VM's latched channels: under auto its
// work waits from now, and under turns it may get the turn.
func (g *Gate) knocked(id uint32) {
	g.mu.Lock()
	defer g.unlock()
	if g.auto != nil && g.latched[id] {
		if b := g.budgets[id]; b != nil {
			b.SetWaiting(true)
		}
	}
	if g.turns != nil {
		g.thinkKnockedLocked(id)
		g.settleLocked()
	}
}

// candidatesLocked lists the VMs that may get the turn: latched with work,
// not held by the scheduler, leaving out skip if skipping.
func (g *Gate) candidatesLocked(skip uint32, skipping bool) []uint32 {
	out := g.waitingLocked(skip, skipping)
	return slices.DeleteFunc(out, g.heldLocked)
}

// event re-evaluates the turn after a VM's drain or knock; t is the turn
// state the hook was installed for (a stale one does nothing).
func (g *Gate) event(t *turnState) {
	g.mu.Lock()
	defer g.unlock()
	if g.turns != t {
		return
	}
	g.settleLocked()
}

// expire is the quantum's timer.
func (g *Gate) expire(t *turnState, gen uint64) {
	g.mu.Lock()
	defer g.unlock()
	if g.turns != t || t.gen != gen || !t.has || !t.contended || t.ending {
		return
	}
	h := t.holder
	g.chargeLocked()
	cands := g.candidatesLocked(h, true)
	if len(cands) == 0 {
		g.uncontendLocked() // the others went away
		return
	}
	if busy, _ := g.holderBusyLocked(h); busy {
		if g.usedLocked() {
			cands = append(cands, h)
		} else {
			t.passed, t.passing = h, true
		}
	}
	if next, ok := t.cfg.Picker.NextTurn(cands); ok && next == h {
		g.contendLocked() // the holder is still the fairest: its turn goes on
		return
	}
	t.ending = true
	g.settleLocked()
}

// holderBusyLocked reports whether holder h has work: in flight, or records
// pending (channel.Channel.Pending: the guest advanced its put) that no
// poll was made for yet. A guest may advance its put and never ring: then
// nothing forwards its records, and pending alone would keep its turn (and
// it a candidate at the quantum's end) with the GPU idle. So the gate polls
// its channels for them (after mu; Gate.resettle settles again once
// polled): they are forwarded, or its channel fails on them, and pending
// records a poll forwarded nothing of no longer keep the turn. pending
// says whether it has records pending with nothing in flight.
func (g *Gate) holderBusyLocked(h uint32) (busy, pending bool) {
	t := g.turns
	if g.inFlightLocked(h) {
		return true, false
	}
	if !g.pendingLocked(h) {
		return false, false
	}
	var n uint64
	if b := g.budgets[h]; b != nil {
		n, _ = b.Starts()
	}
	if t.polled && t.pollStarts == n {
		return false, true
	}
	t.polled, t.pollStarts = true, n
	for _, c := range g.vms[h] {
		g.polls = append(g.polls, pollEntry{h, c})
	}
	g.resettle = t
	return true, true
}

// pendSpellLocked starts (on) or ends a spell of the contended holder h
// with records pending and nothing in flight: the time until its records
// are forwarded (its budget's Starts move) or the spell ends is charged to
// it with its idle turn (idleChargeLocked), so that a holder does not stay
// behind the others by keeping the turn with nothing on the GPU.
func (g *Gate) pendSpellLocked(h uint32, on bool) {
	t := g.turns
	if t.pend && !on {
		end := t.cfg.Clock.Now()
		if b := g.budgets[h]; b != nil {
			if n, at := b.Starts(); n != t.pollStarts {
				end = min(at, end)
			}
		}
		t.addIdle(end - t.pendFrom)
		t.pend = false
	}
	if on && !t.pend && t.contended {
		t.pend, t.pendFrom = true, t.cfg.Clock.Now()
	}
}

// inFlightLocked reports whether a VM has work forwarded and not completed.
func (g *Gate) inFlightLocked(id uint32) bool {
	b := g.budgets[id]
	return b != nil && b.InFlight() > 0
}

// chargeLocked charges the holder, while another VM waits, the busy time
// of its commands completed since the last charge, and charges its work
// still in flight ahead (its budget's estimate: a THROTTLE's exact length),
// netting out what was charged ahead last time. So a turn whose one long
// command runs past the quantum is not extended for free, and over a turn
// the charge adds up to the busy time the backend reported (the estimate
// only moves it between charges). Gaps the holder leaves between its
// commands are not charged, except the idle turn it kept (an anticipation,
// anticipate.go: what the others waited for it).
func (g *Gate) chargeLocked() {
	t := g.turns
	b := g.budgets[t.holder]
	if b == nil {
		return
	}
	busy, q := b.BusyNs(), b.InFlight()
	idle := g.idleChargeLocked()
	if t.contended {
		charge := busy - t.base + q - t.pre + idle
		t.cfg.Picker.ChargeTurn(t.holder, charge)
		t.contCharged += charge
	}
	t.base, t.pre = busy, q
}

// usedLocked reports whether the holder, at its quantum's end, was charged
// at least half the time its turn was contended: it used the GPU (its
// commands ran, or it kept an idle turn, which is charged). A holder the
// picker finds behind keeps the turn only then. One whose work in flight
// held the GPU while the backend counted little of it as busy (a GPU
// worker's host-side work, as a LOAD_MODULE's compile; a completion
// delivered late) is charged little and so stays behind: keeping the turn
// for that, it kept it for as long as the others' lead lasted (a VM beside
// one charged 1% of its turns got 1% of the GPU, waiting up to 500 ms at a
// time: TestTurnsHolderIdleInFlight). Its turns pass at each quantum's end
// instead, so the others wait a quantum and its last commands at most;
// behind by busy time it may be, but they waited for all of its turn. A
// VM that uses its turns keeps them while behind, as before: a heavier
// weight's longer share, a late starter catching up, the launch gaps of
// short kernels (GPU time its commands do not count, well under half).
//
// The time a hand-off's tail (another VM's last work, waited for or past
// its grace: tailGraceLocked) was on the GPU is not the holder's to use: on
// a GPU that time-slices it ran beside the holder's work, and a holder judged on it lost its turns to
// the VM whose kernels overran (a VM of kernels five times their estimate
// took 83% of the GPU beside one of exact kernels:
// TestHandoffTailGraceNetted).
func (g *Gate) usedLocked() bool {
	t := g.turns
	now := t.cfg.Clock.Now()
	own := now - t.contFrom - t.sharedNs
	if t.shared {
		own -= now - max(t.sharedFrom, t.contFrom)
	}
	return 2*t.contCharged >= own
}

// sharedChangedLocked notes when another VM's tail begins and ceases to be
// on the GPU beside the holder's work (a hand-off's tail, waited for or
// owed: usedLocked's shared time); call it after each change to tailed or
// owed.
func (g *Gate) sharedChangedLocked() {
	t := g.turns
	now := t.cfg.Clock.Now()
	on := t.tailed || len(t.owed) > 0
	switch {
	case on && !t.shared:
		t.shared, t.sharedFrom = true, now
	case !on && t.shared:
		t.shared = false
		t.sharedNs += now - max(t.sharedFrom, t.contFrom)
	}
}

// contendLocked starts a quantum for the holder: its budget queues no
// further than the quantum's end, and a timer ends the turn there.
func (g *Gate) contendLocked() {
	t := g.turns
	now := t.cfg.Clock.Now()
	if !t.contended {
		// A VM alone is charged nothing; what it has in flight now runs
		// while others wait, and is charged.
		if b := g.budgets[t.holder]; b != nil {
			t.base, t.pre = b.BusyNs(), 0
		}
		t.contFrom, t.contCharged, t.sharedNs = now, 0, 0
	}
	t.contended = true
	t.deadline = now + t.cfg.QuantumNs
	t.gen++
	if b := g.budgets[t.holder]; b != nil {
		b.SetDeadline(t.deadline, t.cfg.Clock.Now)
		g.wakes = append(g.wakes, b) // a later deadline than the last
	}
	gen := t.gen
	t.cfg.Clock.After(t.cfg.QuantumNs, func() { g.expire(t, gen) })
}

// uncontendLocked stops the quantum: nobody else waits any more. The
// holder is charged until now; an idle spell it is in ends.
func (g *Gate) uncontendLocked() {
	t := g.turns
	g.chargeLocked()
	// Take back what chargeLocked charged ahead for the work in flight:
	// contendLocked re-bases on BusyNs, so that work is charged as it
	// completes if the turn is contended again (else it was charged twice).
	if t.contended && t.pre > 0 {
		t.cfg.Picker.ChargeTurn(t.holder, -t.pre)
		t.pre = 0
	}
	// Nobody waits: re-base the lags on the holder, so that a VM that
	// waited and stopped (or only seemed to: a guest that moves its put
	// back) banks TurnBank at most.
	t.cfg.Picker.NextTurn([]uint32{t.holder})
	// Nobody waits for it any more: an anticipation (charged up to now)
	// ends, and its timer with it, as a pending spell does.
	t.idle, t.pend = false, false
	t.contended = false
	t.gen++
	if b := g.budgets[t.holder]; b != nil {
		b.SetDeadline(0, nil)
		g.wakes = append(g.wakes, b)
	}
}

// overrunLocked starts, once per latch, the grace a latched holder's work in
// flight has to drain: OverrunQuanta quanta. Work the budget let through
// drains about when the quantum ends, or one command later; what runs on
// past the grace is a command far longer than a turn (a kernel of hundreds
// of milliseconds, up to the VM's longest command), and the VMs waiting
// behind it would wait that long. So when the grace ends the turn passes beside it: the
// next holder's commands go to the GPU while that command still runs, and
// the GPU's own time slicing between contexts (compute preemption; the
// sim's timeslice) runs them within a time slice, as under the driver's
// arbitration. The late command is charged to its VM ahead, by its
// estimate, when the quantum ended (chargeLocked); while it overlaps the
// next holder's work the backend's bills of the two are those of the
// driver's arbitration.
func (g *Gate) overrunLocked() {
	t := g.turns
	if !t.cfg.Preempts || t.overrunArmed || !t.contended && len(g.candidatesLocked(t.holder, true)) == 0 {
		return
	}
	t.overrunArmed = true
	gen := t.gen
	t.cfg.Clock.After(t.cfg.QuantumNs*OverrunQuanta, func() { g.overran(t, gen) })
}

// overran ends the grace of overrunLocked: the turn passes if the holder
// it was started for is still latched with work in flight.
func (g *Gate) overran(t *turnState, gen uint64) {
	g.mu.Lock()
	defer g.unlock()
	if g.turns != t || t.gen != gen || !t.has || !t.ending || !g.inFlightLocked(t.holder) {
		return
	}
	t.overrun = true
	g.settleLocked()
}

// handoffLocked decides whether the latched holder h, whose work is still
// in flight, passes the turn now (a hand-off): when the work ends within
// HandoffNs at the latest (channel.Budget.EndBound: its costs counted from
// its last completion, so a command that runs now counts only what it can
// have left), another VM waits, the turn was contended (so that its charge
// is right) and no earlier hand-off's work is still in flight (never two
// at once). The next holder's first commands are then queued on the GPU
// behind h's last ones and start as they end, instead of after the
// completion's and the release's round trip through the host. Otherwise
// it has h's completions call back and arms a timer for the moment the
// bound comes within HandoffNs. A completion moves the bound either way:
// earlier when a command ran shorter than its cost, later when it ran
// longer or its completion was seen late (what is left then counts from the
// completion). So the timer is armed again whenever the bound is earlier
// than the armed one's or the armed one has fired; one that fires early
// only re-evaluates.
//
// No hand-off is made while a command of h's whose cost is no estimate is
// in flight (channel.Budget.Unmeasured: a work command forwarded before
// any was measured, which costs the whole limit or, with no limit, next to
// nothing): the bound then bounds nothing, and the next holder's work
// would queue behind work of any length. Its completion calls back. This
// is preferred to flooring such a cost at the quantum, which would change
// what the budget admits and still hand off behind a command that may run
// far longer; refusing costs a switch's round trip (the drain's) only
// until the VM's first LAUNCH, MEMSET or COPY was measured, as a rule in
// its first turn.
func (g *Gate) handoffLocked(h uint32) bool {
	t := g.turns
	b := g.budgets[h]
	if t.cfg.HandoffNs <= 0 || t.tailed || !t.contended || b == nil ||
		len(g.candidatesLocked(h, true)) == 0 {
		return false
	}
	if b.Unmeasured() > 0 {
		b.SetWatch(true)
		return false
	}
	now := t.cfg.Clock.Now()
	at := b.EndBound() - t.cfg.HandoffNs
	if at <= now {
		return true
	}
	b.SetWatch(true)
	if t.handoffAt <= now || at < t.handoffAt {
		t.handoffAt = at
		t.cfg.Clock.After(at-now, func() { g.event(t) })
	}
	return false
}

// tailGraceLocked starts the grace of a hand-off's tail on a GPU that
// time-slices between contexts: work that still runs OverrunQuanta quanta
// on ran far past its estimate (a LAUNCH's is learned), and the turns no
// longer wait for it (it is counted an overrun; its netting waits in owed),
// as overrunLocked does for a latched holder. On a GPU that does not preempt the next holder's work
// waits behind it anyway.
func (g *Gate) tailGraceLocked() {
	t := g.turns
	if !t.cfg.Preempts {
		return
	}
	gen := t.tailGen
	t.cfg.Clock.After(t.cfg.QuantumNs*OverrunQuanta, func() {
		g.mu.Lock()
		defer g.unlock()
		if g.turns != t || !t.tailed || t.tailGen != gen {
			return
		}
		t.tailed = false
		t.overruns++
		if b := g.budgets[t.tail]; b != nil {
			b.SetWatch(false)
			if t.owed == nil {
				t.owed = map[uint32]tailCharge{}
			}
			t.owed[t.tail] = tailCharge{t.tailBase, t.tailPre}
		}
		g.sharedChangedLocked()
		g.settleLocked()
	})
}

// tailDoneLocked ends the wait for a hand-off's tail that drained: the
// tail VM is charged what its last work ran beyond the estimate charged
// ahead at the hand-off (netTailLocked), and the holder's work, queued behind
// the tail, ran from now at the earliest.
func (g *Gate) tailDoneLocked() {
	t := g.turns
	t.tailed = false
	g.sharedChangedLocked()
	if b := g.budgets[t.tail]; b != nil {
		b.SetWatch(false)
		g.netTailLocked(t.tail, b, tailCharge{t.tailBase, t.tailPre})
	}
	if t.has {
		if b := g.budgets[t.holder]; b != nil {
			b.NotBefore(t.cfg.Clock.Now())
		}
	}
}

// netTailLocked charges VM id what its tail c ran beyond (or, negative,
// short of) the estimate charged ahead for it: the busy time completed
// since the hand-off less that estimate. Work of the tail still in flight
// is the caller's to charge (a turn charges what its holder has in flight).
func (g *Gate) netTailLocked(id uint32, b *channel.Budget, c tailCharge) {
	g.turns.cfg.Picker.ChargeTurn(id, b.BusyNs()-c.base-c.pre)
}

// settleOwedLocked nets the tails no longer waited for whose VMs drained
// or went away.
func (g *Gate) settleOwedLocked() {
	t := g.turns
	for id, c := range t.owed {
		switch b := g.budgets[id]; {
		case b == nil:
			delete(t.owed, id)
		case b.InFlight() == 0:
			g.netTailLocked(id, b, c)
			delete(t.owed, id)
		}
	}
	g.sharedChangedLocked()
}

// grantOwedLocked nets the tail VM id still owes as it gets the turn: what
// of the tail ran until now; the rest runs in its turn and is charged as
// the turn's work in flight (contendLocked), so it is not charged twice.
func (g *Gate) grantOwedLocked(id uint32) {
	t := g.turns
	if c, ok := t.owed[id]; ok {
		if b := g.budgets[id]; b != nil {
			g.netTailLocked(id, b, c)
		}
		delete(t.owed, id)
		g.sharedChangedLocked()
	}
}

// settleLocked moves the turn on as far as the VMs' state allows: it ends
// a turn that should end, passes a drained one on (or hands a draining one
// off), and engages or disengages the quantum.
func (g *Gate) settleLocked() {
	t := g.turns
	if t.tailed && !g.inFlightLocked(t.tail) {
		g.tailDoneLocked()
	}
	g.settleOwedLocked()
	handed := false // the turn was handed off just now
	if t.has {
		if _, ok := g.vms[t.holder]; !ok {
			t.has, t.ending, t.contended = false, false, false
			t.gen++
		}
	}
	if t.has {
		h := t.holder
		others := g.candidatesLocked(h, true)
		busy, pending := g.holderBusyLocked(h)
		stuck := !busy && pending // polled for, nothing went
		if g.idleEndedLocked(h, busy || stuck) || busy {
			t.waited = false // its next drain may be anticipated
		}
		g.pendSpellLocked(h, busy && pending)
		switch {
		case t.ending:
		case g.heldLocked(h):
			t.ending = true // the scheduler holds it
		case len(others) > 0 && !busy:
			if !stuck && (t.idle || g.anticipateLocked(h, others)) {
				return // the holder may come back at once
			}
			t.ending = true // nothing left to do while others wait
		case len(others) > 0 && !t.contended:
			g.contendLocked()
		case len(others) == 0 && t.contended:
			g.uncontendLocked()
		}
		if !t.ending {
			return
		}
		g.syncLocked(h) // latched: nothing more goes
		handoff := false
		if g.inFlightLocked(h) && !t.overrun {
			if handoff = g.handoffLocked(h); !handoff {
				g.overrunLocked()
				return // its drain or progress calls back, or a timer
			}
		}
		if t.overrun {
			t.overruns++
		}
		g.chargeLocked()
		if b := g.budgets[h]; b != nil {
			b.SetDeadline(0, nil)
			b.SetWatch(false)
			if _, owes := t.owed[h]; t.overrun && !owes && b.InFlight() > 0 {
				// The turn passes beside its late work, charged ahead by
				// its estimate: what it runs beyond that is netted when
				// it drains, as a tail past its grace, and its time
				// beside the next holder's work is not the holder's
				// (usedLocked).
				if t.owed == nil {
					t.owed = map[uint32]tailCharge{}
				}
				pre := t.pre
				if !t.contended {
					pre = 0 // chargeLocked charged none of it ahead
				}
				t.owed[h] = tailCharge{t.base, pre}
				g.sharedChangedLocked()
			}
		}
		if handed = handoff; handoff {
			// Its last work, charged ahead by its estimate, is the tail.
			t.handoffs++
			t.tail, t.tailed, t.tailBase, t.tailPre = h, true, t.base, t.pre
			g.sharedChangedLocked()
			t.tailGen++
			g.tailGraceLocked()
		}
		t.has, t.ending, t.contended = false, false, false
		t.gen++
	}
	if t.tailed && !handed {
		return // a hand-off's tail is in flight: the next turn waits for it
	}
	cands := g.candidatesLocked(0, false)
	pick := cands
	if handed {
		// The picker passed over the holder that handed off (or the
		// scheduler holds it); it still counts as waiting.
		pick = slices.DeleteFunc(slices.Clone(cands), func(id uint32) bool { return id == t.tail })
	}
	if t.passing && len(pick) > 1 {
		// It did not use its turn: another VM that waits gets the next.
		pick = slices.DeleteFunc(slices.Clone(pick), func(id uint32) bool { return id == t.passed })
	}
	t.passing = false
	next, ok := t.cfg.Picker.NextTurn(pick)
	if !ok {
		return // nobody waits: the first to ring gets the turn
	}
	g.grantOwedLocked(next)
	t.holder, t.has, t.ending, t.contended = next, true, false, false
	t.idle, t.waited, t.idleNs = false, false, 0
	t.polled, t.pend = false, false
	t.turnIdle, t.turnBusy = 0, 0
	if b := g.budgets[next]; b != nil {
		t.turnBusy = b.BusyNs()
	}
	t.overrunArmed, t.overrun = false, false
	t.handoffAt = 0
	t.granted++
	t.gen++
	g.syncLocked(next)
	if len(cands) > 1 {
		g.contendLocked()
	}
}
