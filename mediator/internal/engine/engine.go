// Package engine is the mediator's control loop for one GPU: at the end of
// each accounting poll phase it turns the poller's measurements into the
// scheduler's charges, asks the scheduler which VMs to hold, and applies the
// decision at the gate. It also keeps per-VM totals of what accounting
// charged and how long each VM was held, for stats and benchmarks.
//
// At each period's end it also sizes every VM's in-flight budget (the
// estimated GPU time a VM may keep forwarded and not completed, see
// mediator/internal/gate and channel.Budget), so that the scheduler's holds
// bind the work a VM queued before them: by default half the coming period
// (DefaultBudgetDiv), twice the dfq threshold. Periods stretched
// because at most one VM was active keep the last budget: a VM alone needs
// no more, and one that arrives then would wait behind it. Until the first
// period the budget is DefaultBudgetNs. Under policy none nobody is bounded.
//
// SetArbitration switches between arbitration driver (the engine's until
// it is called; where none is named the daemon sets Default's and the
// bench DefaultFor's), turns and auto (mediator/internal/gate; under auto the gate switches
// between the other two at each period's end, after the period's charges
// and holds, so that each period runs under one of them): under turns the scheduler picks each
// turn's holder (sched.Scheduler.NextTurn) and is charged each turn's exact
// GPU time; its policy's holds for a limit (cap) or a turn of its own
// (timeslice) stay in force, dfq's of a VM running ahead do not
// (gate.Gate.ApplyAhead: the turn picker shares the GPU). Under turns the
// scheduler's period charges are exact too: the busy time the backend
// reported for each VM's commands completed in the period, and what the
// turn holder's command in flight has run so far (gate.BusyNowNs: with one
// VM at a time on the GPU nothing of it overlaps another VM's; a command
// longer than a period is charged in each period it runs in, not whole in
// the one it ends in, which read as an idle period before a saturated one
// and made dfq forgive the lags), not the poller's
// extrapolated sample, which sees whichever VM held the turn in its short
// poll phase and so would make dfq hold VMs on noise (measured: a normal
// VM beside a deep queue of 10 ms kernels was held 39% of a 10 s run on
// it, and got 42% of the GPU). VMStats.Accounted is then the exact
// charge too.
//
// The engine does not drive time: the accounting poller calls OnPeriod (on
// the simulator's timeline or from the wall-clock poller's goroutine). Lock
// order: Engine.mu, then the scheduler's and the gate's.
package engine

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/sluice-gpu/sluice/mediator/internal/accounting"
	"github.com/sluice-gpu/sluice/mediator/internal/channel"
	"github.com/sluice-gpu/sluice/mediator/internal/gate"
	"github.com/sluice-gpu/sluice/mediator/internal/sched"
)

// DefaultBudgetDiv divides the coming period's length into the default
// in-flight budget: half the period, twice the dfq threshold
// (sched.DefaultThresholdDiv), so that a VM held for running ahead stops
// within half a period more. Not less: a VM needs its refill time's worth of
// work in flight to keep the GPU busy at its share, and a guest that refills
// its rings slowly (a TCG guest: milliseconds from a completion to its next
// doorbell) could not with less. With an eighth, two such guests with a 10×
// kernel-length skew shared the GPU 33/67 under dfq, the GPU 56% busy (the
// QEMU e2e spec); with half, 50/50 and busy.
const DefaultBudgetDiv = 2

// DefaultBudgetNs is the in-flight budget before the first period: half the
// period of one active channel with the accounting defaults (500 µs × 52 / 2
// = 13 ms).
const DefaultBudgetNs = accounting.DefaultPollNs * (1 + accounting.DefaultRatio) / DefaultBudgetDiv

// Engine schedules the VMs of one GPU.
type Engine struct {
	sched *sched.Scheduler
	gate  *gate.Gate

	mu        sync.Mutex
	vms       map[uint32]*vmStat
	periods   int64
	last      sched.Decision
	budgetCfg int64 // SetBudget's setting: 0 derived, > 0 fixed, < 0 none
	derived   int64 // the derived budget (the last unstretched period's)
}

type vmStat struct {
	name      string
	exact     int64   // the VM's busy time at the last period's end (the gate's BusyNowNs), at most
	accounted int64   // sum of the charges (extrapolated; exact under turns)
	share     float64 // of the last poll phase
	heldNs    int64   // time spent held (non-poll phases it was held for)
	heldFrom  int64   // when the current hold began, -1 if not held
}

// New returns an engine with the given scheduler configuration.
func New(cfg sched.Config) (*Engine, error) {
	s, err := sched.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating scheduler: %w", err)
	}
	e := &Engine{sched: s, gate: gate.New(), vms: map[uint32]*vmStat{}, derived: DefaultBudgetNs}
	e.gate.SetBudget(e.budgetLocked(s.Policy()))
	return e, nil
}

// SetBudget sets the VMs' in-flight budget: ns > 0 a fixed budget, 0 the
// default (derived from the period, see the package doc), < 0 none. It
// applies at once.
func (e *Engine) SetBudget(ns int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.budgetCfg = ns
	e.gate.SetBudget(e.budgetLocked(e.sched.Policy()))
}

// budgetLocked is the budget to apply under policy p.
func (e *Engine) budgetLocked(p sched.Policy) int64 {
	switch {
	case p == sched.PolicyNone || e.budgetCfg < 0:
		return 0
	case e.budgetCfg > 0:
		return e.budgetCfg
	}
	return e.derived
}

// SetArbitration switches to arbitration a; cfg (its quantum, clock,
// hand-off threshold and whether the GPU preempts; the engine's scheduler
// picks the turns) matters under turns and auto.
func (e *Engine) SetArbitration(a gate.Arbitration, cfg gate.TurnConfig) error {
	cfg.Picker = e.sched
	if err := e.gate.SetTurns(a, cfg); err != nil {
		return fmt.Errorf("setting the arbitration: %w", err)
	}
	return nil
}

// Arbitration is the arbitration in force (driver or turns, under auto
// too) and the turn's state.
func (e *Engine) Arbitration() (gate.Arbitration, gate.Turn) { return e.gate.Arbitration() }

// Auto is arbitration auto's state (On false when another is set).
func (e *Engine) Auto() gate.AutoStats { return e.gate.Auto() }

// AddVM registers a VM and its channels; it starts released.
func (e *Engine) AddVM(id uint32, name string, weight uint32, cap float64, chans []gate.Channel) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.sched.AddVM(id, weight, cap); err != nil {
		return fmt.Errorf("adding vm %q to the scheduler: %w", name, err)
	}
	e.gate.Add(id, chans)
	e.vms[id] = &vmStat{name: name, heldFrom: -1}
	return nil
}

// RemoveVM forgets a VM, releasing it.
func (e *Engine) RemoveVM(id uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sched.RemoveVM(id)
	e.gate.Remove(id)
	delete(e.vms, id)
}

// SetWeight changes a VM's share from the next period on.
func (e *Engine) SetWeight(id uint32, w uint32) error { return e.sched.SetWeight(id, w) }

// SetCap changes a VM's cap (0: none) from the next period on.
func (e *Engine) SetCap(id uint32, c float64) error { return e.sched.SetCap(id, c) }

// SetPolicy switches the policy from the next period on.
func (e *Engine) SetPolicy(p sched.Policy) error { return e.sched.SetPolicy(p) }

// Policy is the current policy.
func (e *Engine) Policy() sched.Policy { return e.sched.Policy() }

// NextPolicy is the policy set last, in force from the next period on.
func (e *Engine) NextPolicy() sched.Policy { return e.sched.NextPolicy() }

// OnPeriod is the accounting poller's callback at the end of a poll phase.
func (e *Engine) OnPeriod(p accounting.Period) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.periods++
	waiting := e.gate.Waiting()
	turns, _ := e.gate.Arbitration()
	charges := make([]sched.Charge, 0, len(e.vms))
	for id, st := range e.vms {
		busy := p.Busy[id]
		if b, ok := e.gate.BusyNowNs(id); ok {
			if turns == gate.ArbitrationTurns {
				// One VM at a time on the GPU: its completions' busy
				// time, and what the holder's command has run so far,
				// is exactly its GPU time, not a sample. It never goes
				// back: a running command counted ahead of its
				// completion is netted by the next charges.
				busy = max(b-st.exact, 0)
			}
			st.exact = max(st.exact, b)
		}
		st.accounted += busy
		st.share = p.Share[id]
		charges = append(charges, sched.Charge{VM: id, BusyNs: busy, Active: p.Phase.Active[id] || slices.Contains(waiting, id)})
	}
	sort.Slice(charges, func(i, j int) bool { return charges[i].VM < charges[j].VM })
	d := e.sched.EndPeriod(sched.Period{
		Start: p.Start, End: p.End, PollNs: p.NextPollNs, NonPollNs: p.NextNonPollNs(), Charges: charges,
	})
	e.last = d
	if next := p.NextEnd - p.End; !p.Idle && next > 0 {
		e.derived = max(next/DefaultBudgetDiv, 1)
	}
	e.gate.SetBudget(e.budgetLocked(d.Policy))
	var ahead []uint32
	for _, st := range d.VMs {
		if st.Held && st.Reason == sched.ReasonAhead {
			ahead = append(ahead, st.ID)
		}
	}
	e.gate.ApplyAhead(d.Hold, ahead)
	e.gate.EndPeriod(Shares(d.Policy)) // under auto: the next period's arbitration
	for id, st := range e.vms {
		held := e.gate.Held(id) // what binds under the arbitration in force: ApplyAhead
		switch {
		case held && st.heldFrom < 0:
			st.heldFrom = p.End
		case !held && st.heldFrom >= 0:
			st.heldNs += p.End - st.heldFrom
			st.heldFrom = -1
		}
	}
}

// Waiting lists the VMs whose channels hold latched work: for the poller,
// which counts them as active (accounting.Poller.SetWaiting).
func (e *Engine) Waiting() []uint32 { return e.gate.Waiting() }

// VMStats is one VM's view from the engine.
type VMStats struct {
	ID        uint32
	Name      string
	Accounted int64   // GPU ns charged to the scheduler (extrapolated; exact under turns)
	Share     float64 // share of the last poll phase
	Held      bool
	HeldNs    int64 // total time held, up to now
	LagNs     int64 // virtual time ahead of t_sys
	Weight    uint32
	Cap       float64
	// Budget is the VM's in-flight budget (zero when it has none).
	Budget channel.BudgetStats
	// Occupancy is its time with work outstanding (counted under
	// arbitration auto; zero otherwise).
	Occupancy channel.Occupancy
}

// Stats returns every VM's totals, sorted by id; now closes an open hold.
func (e *Engine) Stats(now int64) []VMStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	snap := map[uint32]sched.VMState{}
	for _, s := range e.sched.Snapshot() {
		snap[s.ID] = s
	}
	out := make([]VMStats, 0, len(e.vms))
	for id, st := range e.vms {
		held := st.heldNs
		if st.heldFrom >= 0 && now > st.heldFrom {
			held += now - st.heldFrom
		}
		s := snap[id]
		b, _ := e.gate.Budget(id)
		occ, _ := e.gate.Occupancy(id)
		out = append(out, VMStats{
			ID: id, Name: st.name, Accounted: st.accounted, Share: st.share,
			Held: st.heldFrom >= 0, HeldNs: held, LagNs: s.Lag, Weight: s.Weight, Cap: s.Cap,
			Budget: b, Occupancy: occ,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Periods is how many periods have ended.
func (e *Engine) Periods() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.periods
}
