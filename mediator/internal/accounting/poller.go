package accounting

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// Period is one poll phase and the non-poll phase after it, as reported at
// the end of the poll phase (see the package doc for the convention).
type Period struct {
	// Start is the previous period's End (the poll phase's start for the
	// first period); the poll phase is [Phase.Start, PollEnd], the same as
	// [Start, PollEnd] except with the wall driver, whose timer wakes late
	// (Phase.Start after Start); the non-poll phase is [PollEnd, End], and
	// End is the next period's Start.
	Start, PollEnd, End int64
	Phase               Phase            // raw measurement of the poll phase
	Busy                map[uint32]int64 // Phase.Busy extrapolated over [Start, End]
	Share               map[uint32]float64
	// Idle: at most one VM was active, so the period was stretched by
	// IdleFactor.
	Idle bool
}

// PollNs is the poll phase's length.
func (p *Period) PollNs() int64 { return p.PollEnd - p.Phase.Start }

// NonPollNs is the coming non-poll phase's planned length.
func (p *Period) NonPollNs() int64 { return p.End - p.PollEnd }

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

	nextPoll int64 // the coming poll phase's length
	prevEnd  int64
	started  bool

	// virtual driver
	after    func(delay int64, fn func())
	phaseEnd int64
	sample   func() // p.vSample, bound once
	begin    func() // p.vBegin, bound once

	// wall driver
	now func() int64

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
	p.nextPoll = p.jittered(cfg.meanPollNs(1))
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

// endPhase closes the poll phase at the last sample's time, plans the next
// period and builds the Period to report.
func (p *Poller) endPhase(ph Phase) Period {
	poll := ph.End - ph.Start
	p.pollNs.Add(poll)
	idle := len(ph.Active) <= 1
	mean := p.cfg.meanPollNs(ph.Channels)
	nonPoll := p.jittered(p.cfg.meanNonPollNs(mean, len(ph.Active)))
	p.nextPoll = p.jittered(mean)
	start := ph.Start
	if p.started {
		start = p.prevEnd // periods tile the timeline, whenever the phase began
	}
	per := Period{Start: start, PollEnd: ph.End, End: ph.End + nonPoll, Phase: ph, Idle: idle}
	per.Busy = make(map[uint32]int64, len(ph.Busy))
	per.Share = make(map[uint32]float64, len(ph.Busy))
	for vm, b := range ph.Busy {
		if poll <= 0 {
			per.Busy[vm] = b
			continue
		}
		per.Busy[vm] = int64(float64(b) * float64(per.End-per.Start) / float64(poll))
		per.Share[vm] = float64(b) / float64(poll)
	}
	p.prevEnd, p.started = per.End, true
	p.periods.Add(1)
	return per
}

// NewVirtual returns a poller driven on a simulated timeline: after(delay,
// fn) must call fn once the timeline has advanced by delay ns (the sim's
// After in manual drive), from one goroutine at a time. The first poll phase
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
	p.sample, p.begin = p.vSample, p.vBegin
	after(0, p.begin)
	return p, nil
}

// timed runs f and adds the wall time it took to CPUNs (virtual driver).
func (p *Poller) timed(f func()) {
	t0 := time.Now()
	f()
	p.cpuNs.Add(int64(time.Since(t0)))
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
	p.phaseEnd = t + p.nextPoll
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
	var ph Phase
	p.timed(func() {
		p.est.Observe(&p.st)
		ph = p.est.End(t)
	})
	per := p.endPhase(ph)
	p.onPeriod(per)
	if p.stopped.Load() {
		return
	}
	p.after(max(per.End-t, 0), p.begin)
}
