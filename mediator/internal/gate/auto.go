package gate

import (
	"fmt"
	"maps"
	"slices"

	"github.com/sluice-gpu/sluice/mediator/internal/channel"
)

// Arbitration auto runs turns while at least two VMs are backlogged under
// a scheduling policy that shares the GPU (dfq, cap) and the driver's time
// slicing otherwise, switching at scheduling-period boundaries (EndPeriod,
// which the engine calls at each period's end). It is the default of a
// daemon or bench spec that names no arbitration where turns make sense
// (DefaultArbitration, engine.Default and engine.DefaultFor).
//
// Why: when several VMs keep the GPU saturated, the driver's time slicing
// bills the context switches to the VMs (the completion spans of
// overlapping work include the other contexts' slices: +5 to +20% where
// several VMs always have work queued) and shares the GPU less evenly;
// turns bill exactly and share evenly, and with the hand-off keep the GPU
// as busy. But where VMs are closed loops that wait for their results and
// then think (a kernel, then a sleep), turns cost throughput: a short
// kernel waits behind another VM's whole kernel (first come, first
// served), where the driver's time slicing serves both at once (processor
// sharing), so each VM submits less; and the driver's bills are close there
// (few forced switches).
//
// # The measure
//
// A VM is backlogged in a period when it had work outstanding for at
// least Threshold of it: commands forwarded and not completed, or records
// latched by the gate waiting to be forwarded (a VM the scheduler holds,
// or one waiting for its turn). channel.Budget counts that time exactly on
// the backend's clock (channel.Budget.Occupancy). Latched work counts
// because under turns a VM is in flight only while it holds the turn: by
// forwarded work alone, eight saturating VMs would each be in flight an
// eighth of the time under turns and the mix would leave turns at once
// (and come back a period later, and so on); counted with their latched
// work they are outstanding all the time under either arbitration.
//
// The measure is not the same under both: a closed loop's wait for its
// result is longer under turns (its kernel waits for the holder's turn),
// so its outstanding share is higher there: a VM of 100 µs kernels and 400
// µs sleeps beside VMs of 1 ms kernels was outstanding about 53% of the
// time under the driver and 73% under turns on an H100. The threshold
// (DefaultAutoThreshold, 90%) is above both, so such a mix stays in (or
// goes back to) the driver; a VM whose think time is under a tenth of its
// turnaround is a saturating one under either. A closed loop of depth one
// beside saturating VMs is outstanding nearly all the time under either
// (its one command waits behind theirs): it counts as backlogged, and
// turns bill that mix exactly.
//
// # Hysteresis
//
// Auto enters turns after AutoConfig.Enter periods (default 1) with two
// backlogged VMs, and leaves them after AutoConfig.Leave periods (default
// 2) without. Entering at once: every period spent in the driver's time
// slicing with saturating VMs is billed wrong, and one whole period (26 ms
// or more) of two VMs outstanding ≥ 90% of the time is no accident.
// Leaving after two: a VM that pauses reads higher under turns than under
// the driver (its work waits for the turn), so a dip below the threshold
// under turns is a real pause, but a VM that pauses once (a bursty guest
// between bursts, a synchronisation) dips for one period and saturates
// again after; the second period keeps such a mix from switching twice
// for each pause, and a mix that stopped saturating leaves 2 periods (52
// ms or more) later. A switch costs little either way (SetTurns at
// runtime: to driver releases every VM; to turns latches all but one, whose
// co-runners' work in flight runs out beside it).
//
// # Commands longer than a turn
//
// Where the GPU time-slices between contexts (TurnConfig.Preempts), a
// backlogged VM whose recent commands ran longer than the overrun grace
// (channel.Budget.Longest above OverrunQuanta quanta), or whose work in
// flight has not progressed for that long (its first such command, still
// running), keeps auto in the driver's arbitration: turns pass beside such a command after the grace
// (overrunLocked), so the GPU is time-sliced during it anyway, and its
// bills are the driver's kind, while the VMs beside it wait the grace
// first. Measured on an H100 (200 ms kernels beside 1 ms ones): turns
// gave the short VM a p99 of 24 ms, Jain 0.94-0.99 and the long VM's bill
// +18 to +23%; the driver 9 ms, 1.000 and +14%.
//
// What a guest can do with it: keep work outstanding (or lie about its
// ring's put) to look backlogged. That alone switches nothing: a second
// VM must be backlogged too, and the turns it then gets are fair to every
// VM; what the others pay is the latency of turns.

// Auto defaults (AutoConfig).
const (
	// DefaultAutoThreshold is the share of a period a VM must have had
	// work outstanding to count as backlogged.
	DefaultAutoThreshold = 0.9
	// DefaultAutoEnter is how many periods in a row with two backlogged
	// VMs put turns in force.
	DefaultAutoEnter = 1
	// DefaultAutoLeave is how many periods in a row without put the
	// driver's arbitration back in force.
	DefaultAutoLeave = 2
)

// AutoConfig tunes arbitration auto; zero fields are the defaults.
type AutoConfig struct {
	Threshold float64 // DefaultAutoThreshold
	Enter     int     // DefaultAutoEnter
	Leave     int     // DefaultAutoLeave
}

func (c AutoConfig) check() error {
	if c.Threshold < 0 || c.Threshold > 1 || c.Enter < 0 || c.Leave < 0 {
		return fmt.Errorf("auto %+v: the threshold must be within [0, 1] and the periods not negative", c)
	}
	return nil
}

func (c AutoConfig) withDefaults() AutoConfig {
	if c.Threshold == 0 {
		c.Threshold = DefaultAutoThreshold
	}
	if c.Enter == 0 {
		c.Enter = DefaultAutoEnter
	}
	if c.Leave == 0 {
		c.Leave = DefaultAutoLeave
	}
	return c
}

// AutoStats is arbitration auto's state, for stats.
type AutoStats struct {
	On         bool        // arbitration auto is set
	InForce    Arbitration // driver or turns
	Switches   uint64      // switches between them since auto was set
	Backlogged int         // VMs backlogged in the last period
	// Long: a backlogged VM's commands run past the overrun grace (see
	// above): the last period called for the driver.
	Long    bool
	Periods uint64 // periods ended under auto
	// TurnsPeriods counts the periods that ran under turns.
	TurnsPeriods uint64
}

// autoState is auto's state, guarded by Gate.mu.
type autoState struct {
	cfg    TurnConfig // the turns' configuration (cfg.Auto with defaults)
	last   map[uint32]int64
	lastAt int64
	streak int // periods in a row that called for the other arbitration
	// watching: the budgets count occupancy and progress (watchLocked).
	watching bool
	stats    AutoStats
}

// startAutoLocked sets arbitration auto with cfg, and watches the VMs'
// budgets if there are two or more (watchLocked).
func (g *Gate) startAutoLocked(cfg TurnConfig) {
	cfg.Auto = cfg.Auto.withDefaults()
	a := &autoState{cfg: cfg, last: map[uint32]int64{}, lastAt: cfg.Clock.Now(), stats: AutoStats{On: true}}
	if g.auto != nil {
		a.stats = g.auto.stats // the counts go on
		g.stopAutoLocked()
	}
	g.auto = a
	g.watchLocked()
}

// stopAutoLocked unsets arbitration auto.
func (g *Gate) stopAutoLocked() {
	if g.auto == nil {
		return
	}
	g.auto = nil
	for _, b := range g.budgets {
		b.Track(nil)
		b.SetWaiting(false)
	}
}

// watchLocked starts or stops auto's watch of the VMs' budgets as their
// number calls for: each budget counts its occupancy (channel.Budget.Track)
// and its progress (the clock of channel.Budget.SetClock, for
// LastProgress) while two VMs or more could be backlogged, and neither
// while one VM is alone, which auto can only leave to the driver. Both cost
// clock reads at a VM's starts and drains, every command of a depth-1 loop
// (on an H100 host a depth-1 VM alone ran 7% fewer kernels with them). The
// watch begins at its start: the period it begins in counts only the time
// since (EndPeriod).
func (g *Gate) watchLocked() {
	a := g.auto
	if a == nil {
		return
	}
	want := len(g.budgets) >= 2
	if want == a.watching {
		return
	}
	a.watching = want
	for id, b := range g.budgets {
		if want {
			g.trackLocked(id)
			b.SetWaiting(g.latched[id] && g.pendingLocked(id))
		} else {
			b.Track(nil)
			b.SetWaiting(false)
		}
		if g.turns == nil { // under turns the clock stays the turns'
			if want {
				b.SetClock(a.cfg.Clock.Now) // LastProgress, for the long commands (hookLocked)
			} else {
				b.SetClock(nil)
			}
		}
	}
}

// trackLocked starts counting a VM's occupancy (auto's watch).
func (g *Gate) trackLocked(id uint32) {
	a, b := g.auto, g.budgets[id]
	if a == nil || b == nil {
		return
	}
	b.NotBefore(a.cfg.Clock.Now())
	b.Track(a.cfg.Clock.Now)
	a.last[id] = b.Occupancy().OutstandingNs
}

// waitingChangedLocked tells a VM's budget, under auto, whether its latched
// work waits: on a latch, whether it has records not forwarded; on a
// release, after its channels were polled (unlock), not.
func (g *Gate) waitingChangedLocked(id uint32, latched bool) {
	b := g.budgets[id]
	if g.auto == nil || b == nil {
		return
	}
	if latched {
		b.SetWaiting(g.pendingLocked(id))
		return
	}
	g.unwaits = append(g.unwaits, b)
}

// EndPeriod is the scheduling period's end: under auto it counts the VMs
// backlogged since the last one and switches the arbitration as they call
// for (see above). shares says that the scheduling policy in force shares
// the GPU between VMs that all want it (dfq, cap): under another (none:
// nobody is scheduled; timeslice: the scheduler releases one VM at a time)
// turns serve no share, and auto puts the driver's arbitration in force at
// once. It does nothing under driver or turns.
func (g *Gate) EndPeriod(shares bool) {
	g.mu.Lock()
	defer g.unlock()
	a := g.auto
	if a == nil {
		return
	}
	now := a.cfg.Clock.Now()
	span := now - a.lastAt
	a.lastAt = now
	n, long := 0, false
	grace := a.cfg.QuantumNs * OverrunQuanta
	for _, id := range slices.Sorted(maps.Keys(g.budgets)) {
		b := g.budgets[id]
		if g.latched[id] {
			// A knock can race with the latch's look at the ring, and a
			// failed channel's records no longer wait: look again.
			b.SetWaiting(g.pendingLocked(id))
		}
		out := b.Occupancy().OutstandingNs
		prev, seen := a.last[id]
		a.last[id] = out
		if seen && span > 0 && float64(out-prev) >= a.cfg.Auto.Threshold*float64(span) {
			n++
			long = long || (a.cfg.Preempts && g.longLocked(b, now, grace))
		}
	}
	for id := range a.last {
		if _, ok := g.budgets[id]; !ok {
			delete(a.last, id)
		}
	}
	in := g.inForceLocked()
	a.stats.Backlogged, a.stats.Long = n, long
	a.stats.Periods++
	if in == ArbitrationTurns {
		a.stats.TurnsPeriods++
	}
	want := ArbitrationDriver
	if n >= 2 && !long && shares {
		want = ArbitrationTurns
	}
	if want == in {
		a.streak = 0
		return
	}
	a.streak++
	need := a.cfg.Auto.Enter
	if in == ArbitrationTurns {
		need = a.cfg.Auto.Leave
	}
	if a.streak < need && shares {
		return
	}
	a.streak = 0
	a.stats.Switches++
	g.setTurnsLocked(want, a.cfg)
}

// longLocked reports whether a VM's commands run longer than grace: one
// it completed recently did (channel.Budget.Longest), or its work in
// flight has made no progress (no completion) for longer.
func (g *Gate) longLocked(b *channel.Budget, now, grace int64) bool {
	if b.Longest() > grace {
		return true
	}
	return b.InFlight() > 0 && now-b.LastProgress() > grace
}

// Auto returns arbitration auto's state (On false when it is not set).
func (g *Gate) Auto() AutoStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.auto == nil {
		return AutoStats{InForce: g.inForceLocked()}
	}
	s := g.auto.stats
	s.InForce = g.inForceLocked()
	return s
}

// Occupancy is a VM's occupancy as its budget counted it (zero unless
// auto was set); false if it has no budget.
func (g *Gate) Occupancy(vm uint32) (channel.Occupancy, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, ok := g.budgets[vm]
	if !ok {
		return channel.Occupancy{}, false
	}
	return b.Occupancy(), true
}
