package bench

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/bench/neon"
	"github.com/sluice-gpu/sluice/mediator/bench/spec"
	"github.com/sluice-gpu/sluice/mediator/internal/accounting"
	"github.com/sluice-gpu/sluice/mediator/internal/engine"
	"github.com/sluice-gpu/sluice/mediator/internal/gate"
	"github.com/sluice-gpu/sluice/mediator/internal/sched"
)

// control is an accounting method (and the scheduling fed by it) running
// against the sim.
type control interface {
	// snapshot is called on the timeline at the end of the measured
	// stretch, w.
	snapshot(w int64)
	// covered reports whether accounting has measured [0, w], so that
	// result can say what it charged up to w.
	covered(w int64) bool
	result(w int64) map[uint32]ctlVM
	stats() ctlStats
	stop()
}

// ctlVM is what a control says about one VM over [0, w].
type ctlVM struct {
	accounted int64
	heldNs    int64
	// outstanding is the VM's time with work outstanding up to the
	// snapshot (arbitration auto's measure); -1 when not counted.
	outstanding int64
	firstHeld   int64 // -1: never held
}

type ctlStats struct {
	cpuNs, estimatorNs, pollNs, periods, meanPeriodNs, samplingNs int64
	auto                                                          gate.AutoStats // under arbitration auto
}

// newControl builds the control for s.Accounting over the hosts.
func newControl(s spec.Spec, sm gpu, hosts []*host) (control, error) {
	switch s.Accounting {
	case spec.AccountingOff:
		if s.Policy != spec.PolicyNone {
			return nil, fmt.Errorf("%w: accounting off cannot feed policy %s (use policy none, or an accounting method)",
				ErrUnsupported, s.Policy)
		}
		return offControl{hosts: hosts}, nil
	case spec.AccountingNEONSampling:
		return newNeonControl(s, sm, hosts)
	case spec.AccountingLoGA, spec.AccountingLoGASegmentAverage:
		return newLogaControl(s, sm, hosts)
	}
	return nil, fmt.Errorf("%w: accounting %q", ErrUnsupported, s.Accounting)
}

// offControl charges nothing and holds nobody.
type offControl struct{ hosts []*host }

func (offControl) snapshot(int64)     {}
func (offControl) covered(int64) bool { return true }
func (offControl) stats() ctlStats    { return ctlStats{} }
func (offControl) stop()              {}
func (o offControl) result(int64) map[uint32]ctlVM {
	out := map[uint32]ctlVM{}
	for _, h := range o.hosts {
		out[h.id] = ctlVM{firstHeld: -1, outstanding: -1}
	}
	return out
}

// logaControl is the LoGA poller feeding the engine (scheduler and gate).
type logaControl struct {
	eng    *engine.Engine
	poller *accounting.Poller
	q      *pollQueue
	cancel context.CancelFunc // wall driver
	done   chan struct{}      // wall driver: Run returned

	mu        sync.Mutex
	periods   []periodRec
	firstHeld map[uint32]int64
	held      map[uint32]int64 // engine's held ns at the snapshot
	// outstanding: the VMs' occupancy at the snapshot (under auto)
	outstanding map[uint32]int64
	atSnap      ctlStats // the poller's figures at the snapshot
	lastEnd     int64
}

type periodRec struct {
	start, end int64
	busy       map[uint32]int64
}

func pollConfig(s spec.Spec) accounting.Config {
	cfg := accounting.Config{Method: accounting.Method(s.Accounting), Seed: s.Seed}
	switch r := s.Tuning.PollRatio; {
	case r < 0:
		cfg.Ratio, cfg.IdleFactor = -1, 1 // all the time, idle or not
	case r > 0:
		cfg.Ratio = r
	}
	if f := s.Tuning.IdleFactor; f > 0 {
		cfg.IdleFactor = f
	}
	return cfg
}

func newLogaControl(s spec.Spec, sm gpu, hosts []*host) (*logaControl, error) {
	eng, err := engine.New(sched.Config{Policy: sched.Policy(s.Policy)})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	eng.SetBudget(int64(s.Tuning.InflightBudget)) // 0: the engine's default; negative: none
	l := &logaControl{eng: eng, q: &pollQueue{}, firstHeld: map[uint32]int64{}, lastEnd: -1}
	for _, h := range hosts {
		chans := make([]gate.Channel, len(h.chans))
		for i, c := range h.chans {
			chans[i] = &gated{Channel: c, vm: h.id, q: l.q}
		}
		if err := eng.AddVM(h.id, h.vm.Name, h.vm.Weight, capOf(s, h.vm), chans); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
	}
	if a := gate.Arbitration(s.Arbitration()); a == gate.ArbitrationTurns || a == gate.ArbitrationAuto {
		l.q.direct = true // the gate releases VMs at completions and timers too
		clk := gate.Clock{Now: sm.Clock().Now, After: sm.After}
		cfg := gate.TurnConfig{QuantumNs: int64(s.Tuning.Quantum), Clock: clk, Preempts: backend.TimeSlices(sm),
			HandoffNs: gate.HandoffSetting(s.Tuning.Handoff)}
		if err := eng.SetArbitration(a, cfg); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
	}
	cfg := pollConfig(s)
	if s.Clock == spec.ClockWall {
		l.poller, err = accounting.NewWall(cfg, sm, sm.Clock().Now, l.onPeriod)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		l.poller.SetWaiting(eng.Waiting)
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go func() {
			defer close(l.done)
			_ = l.poller.Run(ctx) // ends with the cancel in stop
		}()
		return l, nil
	}
	l.poller, err = accounting.NewVirtual(cfg, sm, sm.After, l.onPeriod)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	l.poller.SetWaiting(eng.Waiting)
	return l, nil
}

// capOf is the VM's cap where the policy uses it.
func capOf(s spec.Spec, vm spec.VM) float64 {
	if s.Policy == spec.PolicyCap {
		return vm.Cap
	}
	return 0
}

func (l *logaControl) onPeriod(p accounting.Period) {
	l.eng.OnPeriod(p)
	l.q.flush()
	st := l.eng.Stats(p.End)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.periods = append(l.periods, periodRec{start: p.Start, end: p.End, busy: p.Busy})
	l.lastEnd = p.End
	for _, v := range st {
		if _, seen := l.firstHeld[v.ID]; v.Held && !seen {
			l.firstHeld[v.ID] = p.End
		}
	}
}

func (l *logaControl) snapshot(w int64) {
	held, outstanding := map[uint32]int64{}, map[uint32]int64{}
	st := l.pollerStats()
	st.auto = l.eng.Auto()
	for _, v := range l.eng.Stats(w) {
		held[v.ID] = v.HeldNs
		if st.auto.On {
			outstanding[v.ID] = v.Occupancy.OutstandingNs
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held, l.outstanding = held, outstanding
	n := int64(len(l.periods))
	st.periods = n
	if n > 0 {
		st.meanPeriodNs = (l.periods[n-1].end - l.periods[0].start) / n
	}
	l.atSnap = st
}

func (l *logaControl) covered(w int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastEnd >= w
}

// result sums the periods' charges over [0, w]: a period that straddles w
// counts in proportion, as its charge is an extrapolation at an even rate.
func (l *logaControl) result(w int64) map[uint32]ctlVM {
	l.mu.Lock()
	defer l.mu.Unlock()
	acc := map[uint32]float64{}
	for _, p := range l.periods {
		frac := 1.0
		switch {
		case p.start >= w:
			continue
		case p.end > w:
			frac = float64(w-p.start) / float64(p.end-p.start)
		}
		for id, b := range p.busy {
			acc[id] += float64(b) * frac
		}
	}
	out := map[uint32]ctlVM{}
	for id, h := range l.held {
		first, ok := l.firstHeld[id]
		if !ok || first > w {
			first = -1
		}
		o, ok := l.outstanding[id]
		if !ok {
			o = -1
		}
		out[id] = ctlVM{accounted: int64(acc[id] + 0.5), heldNs: h, firstHeld: first, outstanding: o}
	}
	return out
}

// stats are the figures at the snapshot: the run goes on a little after it,
// until accounting covers it.
func (l *logaControl) stats() ctlStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.atSnap
}

func (l *logaControl) pollerStats() ctlStats {
	st := ctlStats{pollNs: l.poller.PollNs()}
	if l.cancel != nil {
		st.cpuNs = l.poller.CPUNs() // the spinning thread's own CPU time
	} else {
		// On the virtual timeline the poller would spin through every poll
		// phase: that is its CPU cost. The estimator's own time in this
		// process is reported apart (it is not deterministic).
		st.cpuNs, st.estimatorNs = st.pollNs, l.poller.CPUNs()
	}
	return st
}

func (l *logaControl) stop() {
	l.poller.Stop()
	if l.cancel != nil {
		l.cancel()
		<-l.done
	}
}

// neonControl is NEON's sampling controller with the spec's policy.
type neonControl struct {
	c      *neon.Controller
	mu     sync.Mutex
	snap   map[uint32]neon.VMStats
	atSnap ctlStats
}

func newNeonControl(s spec.Spec, sm gpu, hosts []*host) (*neonControl, error) {
	cfg := neon.Config{
		WindowNs:     int64(s.Tuning.NeonWindow),
		FreerunRatio: s.Tuning.NeonFreerunRatio,
		Sched:        sched.Config{Policy: sched.Policy(s.Policy)},
	}
	c, err := neon.New(cfg, sm.After, sm.Clock().Now, sm)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	n := &neonControl{c: c}
	for _, h := range hosts {
		chans := make([]neon.Channel, len(h.chans))
		for i, ch := range h.chans {
			chans[i] = ch
		}
		if err := c.AddVM(h.id, h.vm.Weight, capOf(s, h.vm), chans); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		h.onCompletion = n.onCompletion
	}
	sm.After(0, c.Start)
	return n, nil
}

func (n *neonControl) onCompletion(id uint32, c backend.Completion) {
	if c.End > c.Start {
		n.c.OnCompletion(id, c.Start, c.End)
	}
}

func (n *neonControl) snapshot(w int64) {
	st := n.c.Stats(w)
	// NEON polls at 1 kHz on timers, not by spinning: its CPU cost is lost
	// in the noise (LoGA §5.6), so none is reported.
	cs := ctlStats{periods: n.c.Cycles(), samplingNs: n.c.SamplingNs()}
	n.mu.Lock()
	n.snap, n.atSnap = st, cs
	n.mu.Unlock()
}

func (n *neonControl) covered(int64) bool { return true }

func (n *neonControl) result(w int64) map[uint32]ctlVM {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[uint32]ctlVM{}
	for id, v := range n.snap {
		first := v.FirstHeldNs
		if first > w {
			first = -1
		}
		out[id] = ctlVM{accounted: v.Accounted, heldNs: v.HeldNs, firstHeld: first, outstanding: -1}
	}
	return out
}

func (n *neonControl) stats() ctlStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.atSnap
}

func (n *neonControl) stop() { n.c.Stop() }
