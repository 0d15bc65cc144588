package neon

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/backend/sim"
	"github.com/sluice-gpu/sluice/mediator/internal/sched"
)

const ms = int64(1_000_000)

// loop is a closed-loop guest on one channel: it keeps one kernel queued or
// running, sleeping sleep ns after each completion, and submits through a
// latch like channel.Channel's (held: the doorbell is noted, nothing goes).
type loop struct {
	t       *testing.T
	s       *sim.Sim
	v       backend.VM
	kernel  int64
	sleep   int64
	held    bool
	queued  int
	running int
	busy    int64
}

func (l *loop) SetHeld(h bool) { l.held = h }
func (l *loop) Pending() bool  { return l.queued > 0 }
func (l *loop) Poll() {
	for !l.held && l.queued > 0 {
		l.queued--
		l.running++
		if err := l.v.Submit(0, abi.Command{Op: abi.OpThrottle, DurationNs: uint64(l.kernel)}, 0); err != nil {
			l.t.Error(err)
		}
	}
}

func (l *loop) ring() { l.queued++; l.Poll() }

func newRig(t *testing.T, policy sched.Policy, kernels, sleeps []int64) (*sim.Sim, *Controller, []*loop) {
	t.Helper()
	s, err := sim.New(backend.Options{Clock: "virtual", Params: map[string]string{"drive": "manual"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := New(Config{Sched: sched.Config{Policy: policy}}, s.After, s.Clock().Now, s)
	if err != nil {
		t.Fatal(err)
	}
	loops := make([]*loop, len(kernels))
	for i := range kernels {
		l := &loop{t: t, s: s, kernel: kernels[i], sleep: sleeps[i]}
		id := uint32(i + 1)
		l.v, err = s.Attach(backend.VMSpec{ID: id, Channels: 1, Complete: func(cp backend.Completion) {
			l.running--
			l.busy += cp.Busy()
			c.OnCompletion(id, cp.Start, cp.End)
			s.After(l.sleep, l.ring)
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddVM(id, 1, 0, []Channel{l}); err != nil {
			t.Fatal(err)
		}
		loops[i] = l
		s.After(0, l.ring)
	}
	c.Start()
	return s, c, loops
}

func TestAccountsSaturatingVMs(t *testing.T) {
	s, c, loops := newRig(t, sched.PolicyNone, []int64{100_000, 1_000_000}, []int64{0, 0})
	if err := s.Run(2000 * ms); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	now := s.Clock().Now()
	st := c.Stats(now)
	if c.Cycles() < 10 || c.SamplingNs() <= 0 {
		t.Fatalf("cycles %d, sampling %d ns", c.Cycles(), c.SamplingNs())
	}
	for i, l := range loops {
		acc, truth := st[uint32(i+1)].Accounted, s.VMBusy(uint32(i+1))
		// Round robin of two saturating VMs is NEON's own assumption: the
		// estimate is close (commands in flight at the ends blur it).
		if d := float64(acc)/float64(truth) - 1; d > 0.03 || d < -0.03 {
			t.Errorf("vm %d (kernel %d ns): accounted %d, true %d (%+.2f%%)", i+1, l.kernel, acc, truth, 100*d)
		}
		if st[uint32(i+1)].HeldNs != 0 || st[uint32(i+1)].FirstHeldNs != -1 {
			t.Errorf("vm %d held under policy none: %+v", i+1, st[uint32(i+1)])
		}
	}
}

// A light VM sampled alone leaves the GPU idle: a saturating co-runner loses
// time it would have had without the controller.
func TestSamplingIdlesTheGPU(t *testing.T) {
	s, c, _ := newRig(t, sched.PolicyNone, []int64{500_000, 10_000}, []int64{0, 1_000_000})
	if err := s.Run(1000 * ms); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	busy := s.EngineBusy(sim.Compute)
	now := s.Clock().Now()
	// Every cycle: one window of the light VM (2 ms, about 2% busy) and at
	// least one drain poll of idle time; the saturating VM alone would keep
	// the GPU 100% busy.
	if util := float64(busy) / float64(now); util > 0.95 {
		t.Errorf("utilization %.3f with NEON sampling, want below 0.95 (cycles %d)", util, c.Cycles())
	}
}

func TestFairQueuingOnSkew(t *testing.T) {
	shares := map[sched.Policy]float64{}
	for _, p := range []sched.Policy{sched.PolicyNone, sched.PolicyDFQ} {
		s, c, _ := newRig(t, p, []int64{100_000, 1_000_000}, []int64{0, 0})
		if err := s.Run(3000 * ms); err != nil {
			t.Fatal(err)
		}
		c.Stop()
		long, short := s.VMBusy(2), s.VMBusy(1)
		shares[p] = float64(long) / float64(long+short)
		if p == sched.PolicyDFQ && c.Stats(s.Clock().Now())[2].FirstHeldNs < 0 {
			t.Error("dfq never held the long-kernel VM")
		}
	}
	if shares[sched.PolicyNone] < 0.8 || shares[sched.PolicyDFQ] > 0.65 {
		t.Errorf("long-kernel VM's share: none %.3f (want ≥ 0.8), dfq %.3f (want ≤ 0.65)",
			shares[sched.PolicyNone], shares[sched.PolicyDFQ])
	}
}

func TestConfigErrors(t *testing.T) {
	s, err := sim.New(backend.Options{Clock: "virtual", Params: map[string]string{"drive": "manual"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, cfg := range []Config{{WindowNs: -1}, {FreerunRatio: -2}, {DrainPollNs: -5}, {Sched: sched.Config{Policy: "fair"}}} {
		if _, err := New(cfg, s.After, s.Clock().Now, s); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	if _, err := New(Config{}, nil, s.Clock().Now, s); err == nil {
		t.Error("New without after accepted")
	}
}
