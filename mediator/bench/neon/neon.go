// Package neon owns NEON's sampling controller (LoGA paper §2.3, Figure 4),
// the baseline that Sluice's benchmark harness compares LoGA with. It runs on
// a simulated or wall timeline through an After-like function and controls
// the VMs' channels the way NEON controls command submission channels:
//
//   - freerun phase: every VM not found to over-use the GPU submits freely;
//     nothing is measured except how many commands each VM completes;
//   - sampling phase: every VM is held and the GPU drains; then each active
//     VM in turn runs alone for a window (its channels released, all others
//     held), is held again and drains, and its average command length is
//     measured from its completions (Start, End);
//   - at the end of the sampling phase each VM is charged its commands of
//     the freerun phase × its average command length, plus the time its
//     commands ran in the sampling phase; the charges go to a sched.Scheduler
//     (the same fair queuing as Sluice's), whose held VMs stay held through
//     the next freerun phase.
//
// The cost is real: while a VM samples alone the others are held, and a VM
// that does not fill the GPU by itself leaves it idle. Drains are detected by
// reading the status (the channel table's active bits) every DrainPollNs,
// NEON's 1 kHz completion polling by default, so each drain also idles the
// GPU until the next poll. A freerun phase lasts FreerunRatio × the sum of
// the windows of the sampling phase before it.
//
// The controller is driven from one goroutine at a time (the sim's timeline
// driver); OnCompletion must be called from that same goroutine, which the
// sim's Complete callbacks are. Stats may be called from elsewhere.
package neon

import (
	"fmt"
	"slices"
	"sync"

	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/internal/sched"
)

// Defaults of Config.
const (
	DefaultWindowNs     = 2_000_000 // 2 ms alone per VM
	DefaultFreerunRatio = 5         // LoGA's experiments: 1 ms poll, 5 ms non-poll
	DefaultDrainPollNs  = 1_000_000 // NEON polls completions at 1 kHz
)

// neonSaturation makes every period count as saturated: NEON's fair queuing
// has no satisfied-VM rule (t_sys is the minimum over all active VMs), and
// with sched's default a period whose sampling phase idled the GPU would
// never count as saturated, so nobody would ever be held.
const neonSaturation = 1e-9

// Config configures a Controller. Zero values mean the defaults.
type Config struct {
	WindowNs     int64        // how long each active VM runs alone in a sampling phase
	FreerunRatio float64      // freerun length ÷ the sum of the windows before it
	DrainPollNs  int64        // interval of the status reads that detect a drained GPU
	Sched        sched.Config // Saturation 0 means NEON's rule (see neonSaturation), not sched's default
}

func (c *Config) validate() error {
	if c.WindowNs == 0 {
		c.WindowNs = DefaultWindowNs
	}
	if c.FreerunRatio == 0 {
		c.FreerunRatio = DefaultFreerunRatio
	}
	if c.DrainPollNs == 0 {
		c.DrainPollNs = DefaultDrainPollNs
	}
	if c.Sched.Saturation == 0 {
		c.Sched.Saturation = neonSaturation
	}
	if c.WindowNs < 0 || c.DrainPollNs < 0 || !(c.FreerunRatio > 0 && c.FreerunRatio < 1e6) {
		return fmt.Errorf("neon config: window %d ns, drain poll %d ns, freerun ratio %v: want positive values",
			c.WindowNs, c.DrainPollNs, c.FreerunRatio)
	}
	return c.Sched.Validate()
}

// Channel is what the controller needs of a channel (channel.Channel).
type Channel interface {
	SetHeld(held bool)
	Poll()
	Pending() bool
}

// phase is where a controller is in its cycle.
type phase int

const (
	phaseFreerun phase = iota
	phaseDrainAll
	phaseWindow // the sampled VM runs alone
	phaseDrainOne
	phaseStopped
)

type vm struct {
	id    uint32
	chans []Channel
	// this cycle
	freerunCmds             int64
	sampledBusy, sampledCmd int64
	// across cycles
	avgNs     float64 // average command length of the last sampling that saw one
	accounted int64   // sum of the charges
	held      bool    // by the scheduler
	heldFrom  int64
	heldNs    int64
	firstHeld int64 // -1: never
}

// Controller is one GPU's NEON sampling loop.
type Controller struct {
	cfg    Config
	after  func(delay int64, fn func())
	now    func() int64
	status backend.StatusReader
	sched  *sched.Scheduler

	mu         sync.Mutex // guards everything below against Stats
	vms        map[uint32]*vm
	ids        []uint32 // sorted
	phase      phase
	order      []uint32 // VMs to sample this phase
	cur        int      // index in order
	periodFrom int64    // start of the scheduler period in progress
	sampleFrom int64    // start of the sampling phase in progress
	cycles     int64
	samplingNs int64
	st         backend.Status
}

// New returns a controller; AddVM the VMs, then Start.
func New(cfg Config, after func(delay int64, fn func()), now func() int64, status backend.StatusReader) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if after == nil || now == nil || status == nil {
		return nil, fmt.Errorf("neon: nil after, clock or status reader")
	}
	s, err := sched.New(cfg.Sched)
	if err != nil {
		return nil, fmt.Errorf("neon: %w", err)
	}
	return &Controller{cfg: cfg, after: after, now: now, status: status, sched: s, vms: map[uint32]*vm{}}, nil
}

// AddVM registers a VM and its channels before Start.
func (c *Controller) AddVM(id, weight uint32, capShare float64, chans []Channel) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.sched.AddVM(id, weight, capShare); err != nil {
		return fmt.Errorf("neon: adding vm %d: %w", id, err)
	}
	c.vms[id] = &vm{id: id, chans: slices.Clone(chans), firstHeld: -1, heldFrom: -1}
	c.ids = append(c.ids, id)
	slices.Sort(c.ids)
	return nil
}

// Start begins the first freerun phase, everybody released.
func (c *Controller) Start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.periodFrom = c.now()
	c.after(c.freerunNs(len(c.ids)), c.endFreerun)
}

// Stop ends the loop at its next step; VMs keep the state they are in.
func (c *Controller) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.phase = phaseStopped
}

func (c *Controller) freerunNs(sampled int) int64 {
	return max(int64(c.cfg.FreerunRatio*float64(c.cfg.WindowNs)*float64(max(sampled, 1))), 1)
}

// OnCompletion reports one command's end (Start, End on the timeline).
func (c *Controller) OnCompletion(id uint32, start, end int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.vms[id]
	if v == nil {
		return
	}
	sampling := (c.phase == phaseWindow || c.phase == phaseDrainOne) && c.order[c.cur] == id
	switch {
	case sampling && end > start:
		v.sampledBusy += end - start
		v.sampledCmd++
	case !sampling:
		v.freerunCmds++
	}
}

func (c *Controller) setHeld(v *vm, held bool) {
	for _, ch := range v.chans {
		ch.SetHeld(held)
	}
	if !held {
		for _, ch := range v.chans {
			ch.Poll()
		}
	}
}

func (c *Controller) endFreerun() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.phase == phaseStopped {
		return
	}
	c.phase = phaseDrainAll
	c.sampleFrom = c.now()
	for _, id := range c.ids {
		c.setHeld(c.vms[id], true)
	}
	c.waitDrain(c.startSampling)
}

// waitDrain calls next (with c.mu held) once the GPU has nothing queued or
// running, checking every DrainPollNs.
func (c *Controller) waitDrain(next func()) {
	c.status.ReadStatus(&c.st)
	if len(c.st.Active) == 0 && len(c.st.Running) == 0 {
		next()
		return
	}
	c.after(c.cfg.DrainPollNs, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.phase != phaseStopped {
			c.waitDrain(next)
		}
	})
}

// startSampling picks the VMs that had work since the last sampling phase.
func (c *Controller) startSampling() {
	c.order = c.order[:0]
	for _, id := range c.ids {
		v := c.vms[id]
		if v.freerunCmds > 0 || pending(v) {
			c.order = append(c.order, id)
		}
	}
	c.cur = 0
	c.sampleNext()
}

func pending(v *vm) bool {
	for _, ch := range v.chans {
		if ch.Pending() {
			return true
		}
	}
	return false
}

func (c *Controller) sampleNext() {
	if c.cur >= len(c.order) {
		c.finishSampling()
		return
	}
	c.phase = phaseWindow
	v := c.vms[c.order[c.cur]]
	c.setHeld(v, false)
	c.after(c.cfg.WindowNs, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.phase == phaseStopped {
			return
		}
		c.phase = phaseDrainOne
		c.setHeld(v, true)
		c.waitDrain(func() {
			c.cur++
			c.sampleNext()
		})
	})
}

// finishSampling charges every VM, asks the scheduler whom to hold, and
// starts the next freerun phase.
func (c *Controller) finishSampling() {
	now := c.now()
	c.samplingNs += now - c.sampleFrom
	c.cycles++
	freerun := c.freerunNs(len(c.order))
	charges := make([]sched.Charge, 0, len(c.ids))
	for _, id := range c.ids {
		v := c.vms[id]
		if v.sampledCmd > 0 {
			v.avgNs = float64(v.sampledBusy) / float64(v.sampledCmd)
		}
		charge := int64(float64(v.freerunCmds)*v.avgNs) + v.sampledBusy
		v.accounted += charge
		active := v.freerunCmds > 0 || v.sampledCmd > 0 || pending(v)
		charges = append(charges, sched.Charge{VM: id, BusyNs: charge, Active: active})
		v.freerunCmds, v.sampledBusy, v.sampledCmd = 0, 0, 0
	}
	d := c.sched.EndPeriod(sched.Period{
		Start: c.periodFrom, End: now, PollNs: now - c.sampleFrom, NonPollNs: freerun, Charges: charges,
	})
	c.periodFrom = now
	c.phase = phaseFreerun
	for _, id := range c.ids {
		v := c.vms[id]
		held := slices.Contains(d.Hold, id)
		switch {
		case held && !v.held:
			v.heldFrom = now
			if v.firstHeld < 0 {
				v.firstHeld = now
			}
		case !held && v.held:
			v.heldNs += now - v.heldFrom
		}
		v.held = held
		if !held {
			c.setHeld(v, false)
		}
	}
	c.after(freerun, c.endFreerun)
}

// VMStats is one VM's view from the controller.
type VMStats struct {
	// Accounted is the GPU time charged so far, including the estimate for
	// the cycle in progress (its freerun commands × the last average).
	Accounted   int64
	HeldNs      int64 // time held by the scheduler, up to now
	FirstHeldNs int64 // when the scheduler first held it; -1: never
}

// Stats returns every VM's figures at time now.
func (c *Controller) Stats(now int64) map[uint32]VMStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[uint32]VMStats, len(c.vms))
	for id, v := range c.vms {
		held := v.heldNs
		if v.held && now > v.heldFrom {
			held += now - v.heldFrom
		}
		acc := v.accounted + int64(float64(v.freerunCmds)*v.avgNs) + v.sampledBusy
		out[id] = VMStats{Accounted: acc, HeldNs: held, FirstHeldNs: v.firstHeld}
	}
	return out
}

// Cycles is how many sampling phases have ended (scheduler periods).
func (c *Controller) Cycles() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cycles
}

// SamplingNs is the total length of the completed sampling phases, drains
// included: the time the GPU ran at most one VM.
func (c *Controller) SamplingNs() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.samplingNs
}
