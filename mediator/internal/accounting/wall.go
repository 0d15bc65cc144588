package accounting

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// ctxCheckEvery is how many spin iterations pass between checks of the
// context during a poll phase.
const ctxCheckEvery = 256

// NewWall returns a poller driven in real time by Run. now is the backend's
// clock (the one status times are on).
func NewWall(cfg Config, status backend.StatusReader, now func() int64, onPeriod func(Period)) (*Poller, error) {
	p, err := newPoller(cfg, status, onPeriod)
	if err != nil {
		return nil, err
	}
	if now == nil {
		return nil, fmt.Errorf("new wall poller: %w: nil clock", ErrInvalidConfig)
	}
	p.now = now
	return p, nil
}

// Run polls until ctx is done or Stop is called, on the calling goroutine
// locked to its OS thread; it calls onPeriod from there. It returns
// ctx.Err(), or nil after Stop. Run must not be called twice at once.
func (p *Poller) Run(ctx context.Context) error {
	if p.now == nil {
		return fmt.Errorf("running poller: %w: not a wall poller", ErrInvalidConfig)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	p.firstPlan(p.now())
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if p.stopped.Load() {
			return nil
		}
		if !p.wallAwait(ctx, timer, func() int64 { return p.pollAt }) {
			return ctx.Err()
		}
		ph, ok := p.wallPhase(ctx, timer)
		if !ok {
			return ctx.Err()
		}
		p.phase = ph
		if !p.wallAwait(ctx, timer, func() int64 { return p.end }) {
			return ctx.Err()
		}
		p.onPeriod(p.closePeriod(p.now()))
	}
}

// wallAwait sleeps until target(), which a check of a stretched period may
// bring forward (watch); false if ctx ended first.
func (p *Poller) wallAwait(ctx context.Context, timer *time.Timer, target func() int64) bool {
	for {
		n := p.now()
		t := target()
		if n >= t {
			return ctx.Err() == nil
		}
		if !sleepUntil(ctx, timer, p.now, n+p.step(n, t)) {
			return false
		}
		if p.stretched {
			cpu0 := threadCPUNs()
			p.read()
			p.check()
			p.cpuNs.Add(max(threadCPUNs()-cpu0, 0))
		}
	}
}

// sleepUntil waits on timer until now() reaches t; false if ctx ended first.
func sleepUntil(ctx context.Context, timer *time.Timer, now func() int64, t int64) bool {
	d := t - now()
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer.Reset(time.Duration(d))
	select {
	case <-ctx.Done():
		timer.Stop()
		return false
	case <-timer.C:
		return true
	}
}

// wallPhase spins through one poll phase; ok is false when ctx or Stop
// ended it. With method off there is nothing to sample: it sleeps.
func (p *Poller) wallPhase(ctx context.Context, timer *time.Timer) (ph Phase, ok bool) {
	cpu0 := threadCPUNs()
	defer func() { p.cpuNs.Add(max(threadCPUNs()-cpu0, 0)) }()
	p.read()
	t := p.st.Time
	p.est.Begin(t)
	p.est.Observe(&p.st)
	end := t + p.poll
	if !p.sampling() {
		if !sleepUntil(ctx, timer, p.now, end) {
			return Phase{}, false
		}
		p.read()
		return p.est.End(p.st.Time), true
	}
	next := t + p.cfg.SampleNs
	for i := 1; ; i++ {
		n := p.now()
		if n >= end {
			break
		}
		if i%ctxCheckEvery == 0 && (ctx.Err() != nil || p.stopped.Load()) {
			return Phase{}, false
		}
		if n < next {
			continue // spin: a timer would wake about 1 ms late
		}
		p.read()
		p.est.Observe(&p.st)
		if next += p.cfg.SampleNs; next <= n {
			next = n + p.cfg.SampleNs // late (descheduled): no burst to catch up
		}
	}
	p.read()
	p.est.Observe(&p.st)
	return p.est.End(p.st.Time), true
}
