package engine

import (
	"testing"

	"github.com/sluice-gpu/sluice/mediator/internal/accounting"
	"github.com/sluice-gpu/sluice/mediator/internal/channel"
	"github.com/sluice-gpu/sluice/mediator/internal/gate"
	"github.com/sluice-gpu/sluice/mediator/internal/sched"
)

type fakeChannel struct{ held, pending bool }

func (f *fakeChannel) SetHeld(h bool) { f.held = h }
func (f *fakeChannel) Poll()          {}
func (f *fakeChannel) Pending() bool  { return f.pending }

const ms = int64(1e6)

// period builds the i-th period, 9 ms non-poll + 1 ms poll, in which the
// VMs were charged busy ns each (extrapolated).
func period(i int64, busy map[uint32]int64) accounting.Period {
	start := i * 10 * ms
	active := map[uint32]bool{}
	for id := range busy {
		active[id] = true
	}
	return accounting.Period{
		Start: start, End: start + 10*ms, NextEnd: start + 19*ms,
		Phase: accounting.Phase{Start: start + 9*ms, End: start + 10*ms, Active: active},
		Busy:  busy,
	}
}

func TestHogIsHeldAndReleased(t *testing.T) {
	e, err := New(sched.Config{Policy: sched.PolicyDFQ})
	if err != nil {
		t.Fatal(err)
	}
	hog, light := &fakeChannel{}, &fakeChannel{}
	if err := e.AddVM(1, "hog", 1, 0, []gate.Channel{hog}); err != nil {
		t.Fatal(err)
	}
	if err := e.AddVM(2, "light", 1, 0, []gate.Channel{light}); err != nil {
		t.Fatal(err)
	}
	// The hog takes 9/10 of a saturated GPU: 8 ms ahead after one period,
	// beyond the default threshold (a quarter of the coming period).
	e.OnPeriod(period(0, map[uint32]int64{1: 9 * ms, 2: ms}))
	i := int64(1)
	if !hog.held || light.held {
		t.Fatalf("after one period: hog held %v, light held %v", hog.held, light.held)
	}
	// Held with latched work, it stays active (and the poller counts it as
	// such); the light VM catches up.
	hog.pending = true
	if w := e.Waiting(); len(w) != 1 || w[0] != 1 {
		t.Errorf("waiting %v, want [1]", w)
	}
	for n := 0; hog.held && n < 50; n++ {
		e.OnPeriod(period(i, map[uint32]int64{2: 10 * ms}))
		i++
	}
	if hog.held {
		t.Fatal("hog never released once the other VM caught up")
	}
	st := e.Stats(i * 10 * ms)
	if len(st) != 2 || st[0].Name != "hog" || st[0].HeldNs <= 0 || st[1].HeldNs != 0 || st[0].Accounted != 9*ms {
		t.Fatalf("stats %+v", st)
	}
	e.RemoveVM(1)
	if len(e.Stats(0)) != 1 {
		t.Fatal("removed vm still listed")
	}
}

// budgeted is a channel of a VM with an in-flight budget.
type budgeted struct {
	fakeChannel
	b *channel.Budget
}

func (c *budgeted) Budget() *channel.Budget { return c.b }

func TestBudgetFollowsThePeriod(t *testing.T) {
	e, err := New(sched.Config{Policy: sched.PolicyDFQ})
	if err != nil {
		t.Fatal(err)
	}
	b := channel.NewBudget(0)
	if err := e.AddVM(1, "a", 1, 0, []gate.Channel{&budgeted{b: b}}); err != nil {
		t.Fatal(err)
	}
	if b.Limit() != DefaultBudgetNs {
		t.Fatalf("before any period the budget is %d, want %d", b.Limit(), DefaultBudgetNs)
	}
	p := period(0, map[uint32]int64{1: ms})
	e.OnPeriod(p) // the coming period is 9 ms
	if want := 9 * ms / DefaultBudgetDiv; b.Limit() != want {
		t.Fatalf("budget %d after a period, want %d (DefaultBudgetDiv of the coming period)", b.Limit(), want)
	}
	if st := e.Stats(0); st[0].Budget.LimitNs != b.Limit() {
		t.Fatalf("stats show budget %d", st[0].Budget.LimitNs)
	}
	// A period stretched for a VM alone keeps the budget.
	p = period(1, map[uint32]int64{1: ms})
	p.NextEnd, p.Idle = p.End+90*ms, true
	e.OnPeriod(p)
	if want := 9 * ms / DefaultBudgetDiv; b.Limit() != want {
		t.Fatalf("budget %d after an idle-stretched period, want %d kept", b.Limit(), want)
	}
	e.SetBudget(2 * ms)
	if b.Limit() != 2*ms {
		t.Fatalf("fixed budget: %d", b.Limit())
	}
	e.SetBudget(-1)
	if b.Limit() != 0 {
		t.Fatalf("budget off: %d", b.Limit())
	}
	e.SetBudget(0)
	if err := e.SetPolicy(sched.PolicyNone); err != nil {
		t.Fatal(err)
	}
	e.OnPeriod(period(2, map[uint32]int64{1: ms}))
	if b.Limit() != 0 {
		t.Fatalf("policy none: budget %d, want none", b.Limit())
	}
}

// TestAutoEndsPeriods: under arbitration auto each OnPeriod ends the
// gate's auto period (after its charges and holds), and Auto reports it;
// the driver and turns leave auto off.
func TestAutoEndsPeriods(t *testing.T) {
	e, err := New(sched.Config{Policy: sched.PolicyDFQ})
	if err != nil {
		t.Fatal(err)
	}
	now := int64(0)
	clk := gate.Clock{Now: func() int64 { return now }, After: func(int64, func()) {}}
	if err := e.SetArbitration(gate.ArbitrationAuto, gate.TurnConfig{Clock: clk}); err != nil {
		t.Fatal(err)
	}
	for i := range int64(3) {
		now = (i + 1) * 10 * ms
		e.OnPeriod(period(i, nil))
	}
	if s := e.Auto(); !s.On || s.Periods != 3 || s.InForce != gate.ArbitrationDriver || s.Switches != 0 {
		t.Fatalf("auto after 3 idle periods: %+v", s)
	}
	if a, _ := e.Arbitration(); a != gate.ArbitrationDriver {
		t.Fatalf("in force %s, want driver", a)
	}
	if err := e.SetArbitration(gate.ArbitrationTurns, gate.TurnConfig{Clock: clk}); err != nil {
		t.Fatal(err)
	}
	if s := e.Auto(); s.On || s.InForce != gate.ArbitrationTurns {
		t.Fatalf("after setting turns: %+v", s)
	}
}
