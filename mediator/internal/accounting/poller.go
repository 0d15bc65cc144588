package accounting

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// Period is what accounting reports at the end of each period, when the
// scheduler decides (see the package doc for the convention).
type Period struct {
	// Start and End delimit the period: it was planned at Start, its poll
	// phase ran at a random offset inside it, and the scheduler's decision
	// taken at Start held until End. Periods tile the timeline: each Start is
	// the previous End.
	Start, End int64
	// NextEnd is the planned end of the coming period [End, NextEnd], the
	// stretch the scheduler's decision is for.
	NextEnd int64
	// NextPollNs is the planned length of the coming period's poll phase.
	NextPollNs int64
	Phase      Phase            // raw measurement of the poll phase
	Busy       map[uint32]int64 // Phase.Busy extrapolated over [Start, End]
	Share      map[uint32]float64
	// Idle: at most one VM was active in the poll phase or waiting (see
	// SetWaiting), so the coming period was stretched by IdleFactor.
	Idle bool
}

// PollNs is the length of the period's poll phase.
func (p *Period) PollNs() int64 { return p.Phase.End - p.Phase.Start }

// NextNonPollNs is the coming period's planned length outside its poll
// phase.
func (p *Period) NextNonPollNs() int64 { return max(p.NextEnd-p.End-p.NextPollNs, 0) }

// Poller runs poll phases and non-poll phases, feeds an Estimator, and
// reports a Period at the end of each poll phase. CPUNs, PollNs, Periods and
// Stop are safe for concurrent use.
type Poller struct {
	cfg      Config
	est      Estimator
	status   backend.StatusReader
	onPeriod func(Period)
	rng      *rand.Rand
	st       backend.Status

	// the current period: [start, end], poll phase from pollAt, poll long
	start, end, pollAt, poll int64
	phase                    Phase // its poll phase, once measured
	// A stretched (idle) period is watched every checkNs; two VMs active
	// (counting those in known, active when it was planned) end it early.
	stretched bool
	checkNs   int64
	known     map[uint32]bool
	// cut is when contention ended a stretched period before its poll
	// phase (0: it did not): the phase, moved there, is then a sample of
	// the contended rest [cut, end] only, and the uncontended stretch
	// [start, cut) is charged from the checks before it: checks status
	// reads (one at the period's start), checkRun the engines each VM was
	// running in them.
	cut       int64
	checks    int
	checkRun  map[uint32]int
	lastCheck int64 // the time of the last check counted

	// virtual driver
	after     func(delay int64, fn func())
	phaseEnd  int64
	sample    func() // p.vSample, bound once
	begin     func() // p.vBegin, bound once
	close     func() // p.vClose, bound once
	awaitPoll func() // p.vAwaitPoll, bound once
	awaitEnd  func() // p.vAwaitEnd, bound once

	// wall driver
	now func() int64

	waiting func() []uint32 // VMs with work held back (SetWaiting), or nil

	cpuNs   atomic.Int64
	pollNs  atomic.Int64
	periods atomic.Int64
	stopped atomic.Bool
}

func newPoller(cfg Config, status backend.StatusReader, onPeriod func(Period)) (*Poller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if status == nil || onPeriod == nil {
		return nil, fmt.Errorf("new poller: %w: nil status reader or onPeriod", ErrInvalidConfig)
	}
	est, err := NewEstimator(cfg.Method)
	if err != nil {
		return nil, fmt.Errorf("new poller: %w", err)
	}
	p := &Poller{
		cfg: cfg, est: est, status: status, onPeriod: onPeriod,
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed_acc7)),
	}
	return p, nil
}

// Config is the configuration in use, defaults filled in.
func (p *Poller) Config() Config { return p.cfg }

// CPUNs is the poller's own CPU time so far (see the package doc).
func (p *Poller) CPUNs() int64 { return p.cpuNs.Load() }

// PollNs is the total length of the poll phases so far, on the backend clock.
func (p *Poller) PollNs() int64 { return p.pollNs.Load() }

// Periods is how many periods have been reported.
func (p *Poller) Periods() int64 { return p.periods.Load() }

// Stop ends the poller: no sample is taken and no period is reported after
// Stop returns, except one the driver is in the middle of reporting.
func (p *Poller) Stop() { p.stopped.Store(true) }

// jittered draws a length uniformly in mean × [1 − Jitter, 1 + Jitter].
func (p *Poller) jittered(mean int64) int64 {
	j := p.cfg.jitter()
	if j == 0 || mean == 0 {
		return mean
	}
	return max(int64(float64(mean)*(1+j*(2*p.rng.Float64()-1))), 1)
}

// read takes one status sample into p.st.
func (p *Poller) read() { p.status.ReadStatus(&p.st) }

// sampling reports whether the poll phase reads status between its ends.
func (p *Poller) sampling() bool { return p.cfg.Method != MethodOff }

// plan lays out the period starting at start after a poll phase that saw
// channels active channels and vms active VMs: its length and its poll
// phase's, each drawn in ±Jitter around its mean, and the poll phase's
// offset, uniform over the period. Drawing the offset after the lengths, and
// deciding only at period ends, makes the poll phase a uniform random sample
// of a stretch that ran under one decision: the extrapolation is unbiased
// whatever the workload does and however the lengths adapt to it.
func (p *Poller) plan(start int64, channels, vms int) {
	mean := p.cfg.meanPollNs(channels)
	poll := p.jittered(mean)
	length := poll + p.jittered(p.cfg.meanNonPollNs(mean, vms))
	p.start, p.end, p.poll = start, start+length, poll
	p.pollAt = start
	if slack := length - poll; slack > 0 {
		p.pollAt += p.rng.Int64N(slack + 1)
	}
	p.stretched = vms <= 1 && p.cfg.IdleFactor > 1 && p.sampling()
	p.checkNs = max(int64(float64(length)/p.cfg.IdleFactor), 1)
	p.cut, p.checks = 0, 0
	clear(p.checkRun)
	if p.stretched {
		p.tallyCheck() // the status read at start: the first check
	}
}

// tallyCheck counts the engines each VM runs on in the last status read,
// as one check of a stretched period.
func (p *Poller) tallyCheck() {
	if p.checkRun == nil {
		p.checkRun = map[uint32]int{}
	}
	p.checks++
	p.lastCheck = p.st.Time
	for _, r := range p.st.Running {
		p.checkRun[r.VM]++
	}
}

// check is one check of a stretched period, on a status just read: it
// watches for contention, and counts the check unless contention cut the
// period there (the instant two VMs are active is no sample of the
// uncontended stretch before it).
func (p *Poller) check() {
	if !p.watch(p.st.Time) && p.stretched {
		p.tallyCheck()
	}
}

// contended reports whether the last status read, with the VMs the current
// period was planned for, shows two VMs or more active.
func (p *Poller) contended() bool {
	n := len(p.known)
	for _, a := range p.st.Active {
		if n >= 2 {
			break
		}
		if !p.known[a.VM] {
			p.known[a.VM] = true
			n++
		}
	}
	return n >= 2
}

// watch is called at each check of a stretched period with a fresh status
// read at time t: contention ends the stretch, and watch reports whether it
// cut the period before its poll phase. The period is stretched because at
// most one VM was active; once two are, the scheduler must decide again
// soon, or they share the GPU for a whole stretch (IdleFactor periods)
// without a decision (seen live: a poll phase that fell into a gap of two
// saturating guests stretched the next period to 300 ms, in which the
// long-kernel VM took 85%). After the poll phase, the period ends now: the
// phase, drawn uniform over the stretch and taken before now, is a uniform
// sample of [start, now]. Before it, the phase moves to now and the period
// ends with it; the phase then samples only the contended [now, end], and
// the stretch before is charged from the checks (cut). Charging the whole
// period from a phase at the instant a second VM arrived overcharged it by
// ~40% in the bursty specs (and undercharged the one that ran alone).
func (p *Poller) watch(t int64) bool {
	if !p.stretched || !p.contended() {
		return false
	}
	p.stretched = false
	if t < p.pollAt {
		p.pollAt = t
		p.end = t + p.poll
		p.cut = t
		return true
	}
	p.end = max(t, p.pollAt+p.poll)
	return false
}

// step is how long to wait towards target from t: all the way, or in checks
// while the period is stretched.
func (p *Poller) step(t, target int64) int64 {
	d := target - t
	if p.stretched {
		d = min(d, p.checkNs)
	}
	return max(d, 0)
}

// SetWaiting tells the poller which VMs have work the scheduler holds back:
// they count as active when the poller decides whether at most one VM is
// (and the period may be stretched), although they cannot run. Call it
// before the poller starts.
func (p *Poller) SetWaiting(waiting func() []uint32) { p.waiting = waiting }

// activeVMs counts the VMs active in ph or waiting.
func (p *Poller) activeVMs(ph Phase) int {
	n := len(ph.Active)
	if p.waiting != nil {
		for _, vm := range p.waiting() {
			if !ph.Active[vm] {
				n++
			}
		}
	}
	return n
}

// activeSet is the set of VMs active in ph or waiting.
func (p *Poller) activeSet(ph Phase) map[uint32]bool {
	set := make(map[uint32]bool, len(ph.Active)+1)
	for vm := range ph.Active {
		set[vm] = true
	}
	if p.waiting != nil {
		for _, vm := range p.waiting() {
			set[vm] = true
		}
	}
	return set
}

// closePeriod builds the Period that ends at end from the poll phase
// measured in it, and plans the next one.
func (p *Poller) closePeriod(end int64) Period {
	ph := p.phase
	poll := ph.End - ph.Start
	p.pollNs.Add(poll)
	per := Period{Start: p.start, End: max(end, p.start), Phase: ph}
	per.Busy = make(map[uint32]int64, len(ph.Busy))
	per.Share = make(map[uint32]float64, len(ph.Busy))
	// What the poll phase stands for: [from, End]. After a cut, the
	// contention began somewhere between the last clean check and the
	// cut: the checks stand for the stretch up to the middle of that
	// interval, the phase for the rest (uniform onset: no bias either way).
	from := per.Start
	if p.cut > per.Start && p.cut <= per.End && p.checks > 0 {
		from = max(per.Start, p.lastCheck+(p.cut-p.lastCheck)/2)
		for vm, n := range p.checkRun {
			per.Busy[vm] = int64(float64(n) * float64(from-per.Start) / float64(p.checks))
		}
	}
	for vm, b := range ph.Busy {
		if poll <= 0 {
			per.Busy[vm] += b
			continue
		}
		per.Busy[vm] += int64(float64(b) * float64(per.End-from) / float64(poll))
		per.Share[vm] = float64(b) / float64(poll)
	}
	vms := p.activeVMs(ph)
	per.Idle = vms <= 1
	p.known = p.activeSet(ph)
	p.plan(per.End, ph.Channels, vms)
	per.NextEnd, per.NextPollNs = p.end, p.poll
	p.phase = Phase{}
	p.periods.Add(1)
	return per
}

// NewVirtual returns a poller driven on a simulated timeline: after(delay,
// fn) must call fn once the timeline has advanced by delay ns (the sim's
// After in manual drive), from one goroutine at a time. The first period
// starts at once (through after(0, …)); onPeriod is called from the
// callbacks.
func NewVirtual(cfg Config, status backend.StatusReader, after func(delay int64, fn func()), onPeriod func(Period)) (*Poller, error) {
	p, err := newPoller(cfg, status, onPeriod)
	if err != nil {
		return nil, err
	}
	if after == nil {
		return nil, fmt.Errorf("new virtual poller: %w: nil after", ErrInvalidConfig)
	}
	p.after = after
	p.sample, p.begin, p.close = p.vSample, p.vBegin, p.vClose
	p.awaitPoll, p.awaitEnd = p.vAwaitPoll, p.vAwaitEnd
	after(0, p.vStart)
	return p, nil
}

// timed runs f and adds the wall time it took to CPUNs (virtual driver).
func (p *Poller) timed(f func()) {
	t0 := time.Now()
	f()
	p.cpuNs.Add(int64(time.Since(t0)))
}

// firstPlan plans the first period, before anything was seen: one channel,
// and not stretched as idle.
func (p *Poller) firstPlan(t int64) { p.plan(t, 1, 2) }

func (p *Poller) vStart() {
	if p.stopped.Load() {
		return
	}
	p.read()
	t := p.st.Time
	p.firstPlan(t)
	p.after(max(p.pollAt-t, 0), p.awaitPoll)
}

// vAwaitPoll waits for the poll phase, vAwaitEnd for the period's end.
func (p *Poller) vAwaitPoll() { p.vAwait(&p.pollAt, p.awaitPoll, p.begin) }
func (p *Poller) vAwaitEnd()  { p.vAwait(&p.end, p.awaitEnd, p.close) }

// vAwait runs then once the timeline reaches *target. Only a stretched
// period's checks read the status here (watch may bring *target forward);
// otherwise this runs at *target exactly.
func (p *Poller) vAwait(target *int64, again, then func()) {
	if p.stopped.Load() {
		return
	}
	if p.stretched {
		p.timed(p.read)
		p.check()
		if t := p.st.Time; t < *target {
			p.after(p.step(t, *target), again)
			return
		}
	}
	then()
}

func (p *Poller) vBegin() {
	if p.stopped.Load() {
		return
	}
	p.read()
	t := p.st.Time
	p.timed(func() {
		p.est.Begin(t)
		p.est.Observe(&p.st)
	})
	p.phaseEnd = t + p.poll
	p.vNext(t)
}

// vNext schedules the next sample: every SampleNs, the last exactly at the
// phase end.
func (p *Poller) vNext(t int64) {
	d := p.phaseEnd - t
	if p.sampling() {
		d = min(d, p.cfg.SampleNs)
	}
	p.after(max(d, 1), p.sample)
}

func (p *Poller) vSample() {
	if p.stopped.Load() {
		return
	}
	p.read()
	t := p.st.Time
	if t < p.phaseEnd {
		p.timed(func() { p.est.Observe(&p.st) })
		p.vNext(t)
		return
	}
	p.timed(func() {
		p.est.Observe(&p.st)
		p.phase = p.est.End(t)
	})
	p.after(p.step(t, p.end), p.awaitEnd)
}

func (p *Poller) vClose() {
	if p.stopped.Load() {
		return
	}
	p.read()
	per := p.closePeriod(p.st.Time)
	p.onPeriod(per)
	if p.stopped.Load() {
		return
	}
	p.after(p.step(p.st.Time, p.pollAt), p.awaitPoll)
}
