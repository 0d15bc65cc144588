package sched

import (
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
)

func newSched(t *testing.T, cfg Config, vms ...uint32) *Scheduler {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range vms {
		if err := s.AddVM(id, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// period returns the n-th 10 ms period (from 0) with the given charges.
func period(n int64, cs ...Charge) Period {
	return Period{Start: n * periodNs, End: (n + 1) * periodNs, PollNs: pollNs, NonPollNs: nonPollNs, Charges: cs}
}

func busy(id uint32, ns int64) Charge { return Charge{VM: id, BusyNs: ns, Active: true} }
func waiting(id uint32) Charge        { return Charge{VM: id, Active: true} }

func state(t *testing.T, s *Scheduler, id uint32) VMState {
	t.Helper()
	for _, st := range s.Snapshot() {
		if st.ID == id {
			return st
		}
	}
	t.Fatalf("VM %d not in snapshot", id)
	return VMState{}
}

func TestParsePolicy(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Policy
		err  bool
	}{
		{"", PolicyDFQ, false}, {"none", PolicyNone, false}, {"dfq", PolicyDFQ, false},
		{"cap", PolicyCap, false}, {"timeslice", PolicyTimeslice, false},
		{"DFQ", "", true}, {"fair", "", true}, {" dfq", "", true},
	} {
		got, err := ParsePolicy(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParsePolicy(%q) = %q, %v", tt.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParsePolicy(%q) error %v is not ErrInvalid", tt.in, err)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Policy: "fair"}, {Threshold: -1}, {CapWindow: -1}, {CapWindow: 1 << 21},
		{Saturation: -0.1}, {Saturation: 1.1}, {Saturation: math.NaN()},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%+v) error %v, want ErrInvalid", cfg, err)
		}
	}
	s := newSched(t, Config{})
	if s.Policy() != PolicyDFQ {
		t.Errorf("default policy %q", s.Policy())
	}
}

func TestSettersReject(t *testing.T) {
	s := newSched(t, Config{}, 1)
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"weight of unknown VM", s.SetWeight(9, 1), ErrNotFound},
		{"weight 0", s.SetWeight(1, 0), ErrInvalid},
		{"cap of unknown VM", s.SetCap(9, 0.5), ErrNotFound},
		{"negative cap", s.SetCap(1, -0.1), ErrInvalid},
		{"cap over 1", s.SetCap(1, 1.01), ErrInvalid},
		{"NaN cap", s.SetCap(1, math.NaN()), ErrInvalid},
		{"infinite cap", s.SetCap(1, math.Inf(1)), ErrInvalid},
		{"bad policy", s.SetPolicy("fair"), ErrInvalid},
		{"empty policy", s.SetPolicy(""), ErrInvalid},
		{"duplicate VM", s.AddVM(1, 1, 0), ErrExists},
		{"VM of weight 0", s.AddVM(2, 0, 0), ErrInvalid},
		{"VM with a bad cap", s.AddVM(2, 1, 2), ErrInvalid},
		{"good weight", s.SetWeight(1, math.MaxUint32), nil},
		{"good cap", s.SetCap(1, 1), nil},
		{"no cap", s.SetCap(1, 0), nil},
		{"good policy", s.SetPolicy(PolicyTimeslice), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, tt.want) || (tt.want == nil) != (tt.err == nil) {
				t.Errorf("error %v, want %v", tt.err, tt.want)
			}
		})
	}
	if n := len(s.Snapshot()); n != 1 {
		t.Errorf("%d VMs after failed adds", n)
	}
}

// aheadState runs VM 1 alone on the GPU while VM 2 waits, until VM 1 is
// held: two periods of 10 ms put it 20 ms ahead, over the 10 ms threshold.
func aheadState(t *testing.T) *Scheduler {
	t.Helper()
	s := newSched(t, Config{}, 1, 2)
	s.EndPeriod(period(0, busy(1, periodNs), waiting(2)))
	if d := s.EndPeriod(period(1, busy(1, periodNs), waiting(2))); !slices.Equal(d.Hold, []uint32{1}) {
		t.Fatalf("hog not held: %+v", d)
	}
	return s
}

func TestPeriodsThatChangeNothing(t *testing.T) {
	t.Run("zero length keeps justified holds", func(t *testing.T) {
		s := aheadState(t)
		before := s.Snapshot()
		// The charges of a zero-length period are ignored.
		d := s.EndPeriod(Period{Start: 5, End: 5, PollNs: pollNs, NonPollNs: nonPollNs, Charges: []Charge{busy(1, periodNs), busy(2, periodNs)}})
		if !slices.Equal(d.Hold, []uint32{1}) {
			t.Errorf("held %v, want [1]", d.Hold)
		}
		if after := s.Snapshot(); !slices.Equal(before, after) {
			t.Errorf("state changed:\n%+v\n%+v", before, after)
		}
		d = s.EndPeriod(Period{Start: 10, End: 5, Charges: []Charge{busy(1, periodNs)}})
		if !slices.Equal(d.Hold, []uint32{1}) || !slices.Equal(before, s.Snapshot()) {
			t.Errorf("negative-length period: held %v, state %+v", d.Hold, s.Snapshot())
		}
	})
	t.Run("nothing ran releases everyone", func(t *testing.T) {
		s := aheadState(t)
		tsys, lag := s.TSys(), state(t, s, 1).Lag
		d := s.EndPeriod(period(2))
		if len(d.Hold) != 0 {
			t.Errorf("held %v with nobody active", d.Hold)
		}
		if d.TSys != tsys || state(t, s, 1).Lag != lag {
			t.Errorf("t_sys %d→%d, lag %d→%d", tsys, d.TSys, lag, state(t, s, 1).Lag)
		}
		// The debt is still there: as soon as VM 2 is back, VM 1 is held.
		if d := s.EndPeriod(period(3, waiting(1), busy(2, periodNs/2))); !slices.Equal(d.Hold, []uint32{1}) {
			t.Errorf("held %v after VM 2 came back, want [1]", d.Hold)
		}
	})
	t.Run("zero length with nobody active holds nobody", func(t *testing.T) {
		s := newSched(t, Config{}, 1)
		if d := s.EndPeriod(Period{}); len(d.Hold) != 0 || d.TSys != 0 || d.Threshold != 0 {
			t.Errorf("zero period: %+v", d)
		}
	})
}

func TestJoinAndLeaveMidRun(t *testing.T) {
	s := newSched(t, Config{Threshold: periodNs}, 1, 2)
	for n := range int64(5) {
		s.EndPeriod(period(n, busy(1, 7*periodNs/10), busy(2, 3*periodNs/10)))
	}
	before := s.Snapshot()
	tsys := s.TSys()
	if tsys == 0 {
		t.Fatal("t_sys did not move")
	}
	if err := s.AddVM(3, 1, 0); err != nil {
		t.Fatal(err)
	}
	c := state(t, s, 3)
	if c.VTime != tsys || c.Lag != 0 || c.Held {
		t.Fatalf("joined at %+v, want vtime %d", c, tsys)
	}
	if got := s.Snapshot()[:2]; !slices.Equal(got, before) {
		t.Errorf("join changed the others: %+v → %+v", before, got)
	}
	// VM 3 is not held for what the others did before it came, even
	// running a whole period alone while VM 1 waits.
	d := s.EndPeriod(period(5, busy(3, periodNs), waiting(1), waiting(2)))
	if slices.Contains(d.Hold, 3) {
		t.Errorf("newcomer held: %+v", d)
	}
	// VM 2 leaves mid-phase; its charge arrives after: ignored.
	s.RemoveVM(2)
	s.RemoveVM(2) // unknown: no-op
	d = s.EndPeriod(period(6, busy(1, periodNs/2), busy(2, periodNs), busy(3, periodNs/2)))
	if len(d.VMs) != 2 || slices.Contains(d.Hold, 2) {
		t.Errorf("removed VM still decided on: %+v", d)
	}
}

func TestPersistentDebt(t *testing.T) {
	s := newSched(t, Config{Threshold: periodNs}, 1, 2)
	// VM 1 forwarded a 40 ms command before it was held; it runs on through
	// four periods while VM 2 waits behind it, then VM 2 runs.
	steps := []struct {
		charges []Charge
		held    bool
		lag     int64 // VM 1's, in periods
	}{
		{[]Charge{busy(1, periodNs), waiting(2)}, false, 1}, // at the threshold, not over
		{[]Charge{busy(1, periodNs), waiting(2)}, true, 2},  // over: held at once
		{[]Charge{busy(1, periodNs), waiting(2)}, true, 3},  // held, still charged: the debt grows
		{[]Charge{busy(1, periodNs), waiting(2)}, true, 4},
		{[]Charge{waiting(1), busy(2, periodNs)}, true, 3}, // VM 2 catches up
		{[]Charge{waiting(1), busy(2, periodNs)}, true, 2},
		{[]Charge{waiting(1), busy(2, periodNs)}, false, 1}, // within the threshold: released
		{[]Charge{busy(1, periodNs/2), busy(2, periodNs/2)}, false, 1},
	}
	for i, st := range steps {
		d := s.EndPeriod(period(int64(i), st.charges...))
		v1 := d.VMs[0]
		if v1.Held != st.held || v1.Lag != st.lag*periodNs || d.VMs[1].Lag != 0 {
			t.Fatalf("period %d: VM 1 held %v lag %d, VM 2 lag %d; want held %v lag %d",
				i, v1.Held, v1.Lag, d.VMs[1].Lag, st.held, st.lag*periodNs)
		}
	}
	if st := state(t, s, 1); st.ChargedNs != 4*periodNs+periodNs/2 {
		t.Errorf("VM 1 charged %d", st.ChargedNs)
	}
}

func TestWeightChangeMidRun(t *testing.T) {
	m := newModel(t, Config{})
	m.add(1, 1, 0, load{demand: 1, kernel: 1})
	m.add(2, 1, 0, load{demand: 1, kernel: 4})
	m.run(500)
	sh := m.shares()
	if math.Abs(sh[1]-0.5) > 0.01 {
		t.Fatalf("equal weights: VM 1 share %.4f", sh[1])
	}
	before := m.s.Snapshot()
	if err := m.s.SetWeight(1, 3); err != nil {
		t.Fatal(err)
	}
	after := m.s.Snapshot()
	if before[0].Lag != after[0].Lag || after[0].Weight != 3 {
		t.Errorf("SetWeight rewrote history: %+v → %+v", before[0], after[0])
	}
	m.reset()
	m.run(500)
	sh = m.shares()
	t.Logf("after weight 3:1: shares %.4f %.4f", sh[1], sh[2])
	if math.Abs(sh[1]-0.75)/0.75 > 0.03 || math.Abs(sh[2]-0.25)/0.25 > 0.03 {
		t.Errorf("shares %.4f %.4f, want 0.75 0.25", sh[1], sh[2])
	}
}

func TestIdleVMReturnsWithoutBankedCredit(t *testing.T) {
	m := newModel(t, Config{})
	m.add(1, 1, 0, load{demand: 1, kernel: 1})
	m.add(2, 1, 0, load{})
	m.run(100)
	if st := state(t, m.s, 2); st.Lag != 0 || st.VTime != m.s.TSys() {
		t.Fatalf("idle VM %+v, t_sys %d", st, m.s.TSys())
	}
	if st := state(t, m.s, 1); st.Lag != 0 || st.Held {
		t.Fatalf("lone VM %+v", st)
	}
	m.loads[2] = load{demand: 1, kernel: 1}
	m.reset()
	for i := range 20 {
		d := m.step()
		if len(d.Hold) != 0 {
			// Equal kernels split the GPU evenly: nobody gets ahead.
			t.Fatalf("period %d after the return: held %v", i, d.Hold)
		}
	}
	if sh := m.shares(); math.Abs(sh[2]-0.5) > 0.01 {
		t.Errorf("returning VM got %.4f of the first 20 periods, want 0.5", sh[2])
	}
}

func TestSatisfiedVMsDoNotPinTsys(t *testing.T) {
	t.Run("two light VMs are never held", func(t *testing.T) {
		m := newModel(t, Config{})
		m.add(1, 1, 0, load{demand: 0.6})
		m.add(2, 1, 0, load{demand: 0.3})
		for i := range 200 {
			if d := m.step(); len(d.Hold) != 0 || d.Saturated {
				t.Fatalf("period %d: %+v", i, d)
			}
		}
	})
	t.Run("a hog next to a light VM", func(t *testing.T) {
		m := newModel(t, Config{})
		m.add(1, 1, 0, load{demand: 1, kernel: 1})
		m.add(2, 1, 0, load{demand: 0.1})
		m.run(999)
		logShares(t, m)
		if s := m.timeShare(2); math.Abs(s-0.1) > 0.001 {
			t.Errorf("light VM got %.4f, want its 0.1", s)
		}
		if s := m.timeShare(1); s < 0.59 {
			t.Errorf("hog got %.4f", s)
		}
	})
}

func TestPolicySwitchMidRun(t *testing.T) {
	m := newModel(t, Config{})
	m.add(1, 1, 0, load{demand: 1, kernel: 10})
	m.add(2, 1, 0, load{demand: 1, kernel: 1})
	m.run(100)
	for i := 0; !m.held[1]; i++ { // switch while VM 1 is held
		if i > 10 {
			t.Fatal("VM 1 never held")
		}
		m.step()
	}
	if err := m.s.SetPolicy(PolicyNone); err != nil {
		t.Fatal(err)
	}
	if m.s.Policy() != PolicyDFQ || !state(t, m.s, 1).Held {
		t.Error("policy changed before EndPeriod")
	}
	if d := m.step(); len(d.Hold) != 0 || d.Policy != PolicyNone {
		t.Fatalf("switch to none: %+v", d)
	}
	m.reset()
	m.run(100)
	if r := float64(m.got[1]) / float64(m.got[2]); math.Abs(r-10) > 0.01 {
		t.Errorf("under none: ratio %.3f, want 10", r)
	}
	lag := state(t, m.s, 1).Lag
	if lag < 50*periodNs {
		t.Fatalf("no lag run up under none: %d", lag)
	}
	// Back to dfq: the debt beyond the threshold is forgiven; VM 1 is held
	// again only once it goes on running ahead.
	if err := m.s.SetPolicy(PolicyDFQ); err != nil {
		t.Fatal(err)
	}
	d := m.step()
	if v := d.VMs[0]; v.Lag != d.Threshold || v.Held {
		t.Fatalf("entering dfq: %+v, threshold %d", v, d.Threshold)
	}
	if d := m.step(); !slices.Equal(d.Hold, []uint32{1}) {
		t.Fatalf("hog not held right after the switch: %v", d.Hold)
	}
	m.reset()
	m.run(200)
	if sh := m.shares(); jain([]float64{sh[1], sh[2]}) < 0.99 {
		t.Errorf("dfq after switch: shares %v", sh)
	}
	// To timeslice: exactly one runs.
	if err := m.s.SetPolicy(PolicyTimeslice); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if d := m.step(); len(d.Hold) != 1 || d.Policy != PolicyTimeslice {
			t.Fatalf("timeslice: %+v", d)
		}
	}
	// To cap with a cap set at the same time.
	if err := m.s.SetCap(2, 0.05); err != nil {
		t.Fatal(err)
	}
	if err := m.s.SetPolicy(PolicyCap); err != nil {
		t.Fatal(err)
	}
	m.step()
	m.reset()
	m.run(400)
	if s := m.timeShare(2); s > 0.05+0.003 {
		t.Errorf("cap 0.05 after switch: VM 2 got %.4f", s)
	}
	if slices.Contains(m.last.Hold, 1) {
		t.Errorf("uncapped VM held under cap: %v", m.last.Hold)
	}
}

func TestRobustCharges(t *testing.T) {
	t.Run("negative, unknown and repeated charges", func(t *testing.T) {
		s := newSched(t, Config{}, 1, 2)
		d := s.EndPeriod(period(0,
			Charge{VM: 1, BusyNs: -5 * periodNs, Active: true},
			Charge{VM: 99, BusyNs: periodNs, Active: true},
			busy(2, periodNs/2), busy(2, periodNs/2), Charge{VM: 2, BusyNs: math.MinInt64}))
		if v := d.VMs[0]; v.BusyNs != 0 || v.Lag != 0 || !v.Active {
			t.Errorf("VM 1: %+v", v)
		}
		if v := d.VMs[1]; v.BusyNs != periodNs || v.Lag != periodNs {
			t.Errorf("VM 2: %+v", v)
		}
		if len(d.VMs) != 2 {
			t.Errorf("unknown VM appeared: %+v", d.VMs)
		}
	})
	t.Run("extreme values do not overflow", func(t *testing.T) {
		s := newSched(t, Config{}, 1)
		if err := s.AddVM(2, math.MaxUint32, 1); err != nil {
			t.Fatal(err)
		}
		p := Period{Start: math.MinInt64, End: math.MaxInt64, PollNs: math.MaxInt64, NonPollNs: math.MaxInt64,
			Charges: []Charge{busy(1, math.MaxInt64), busy(2, math.MaxInt64)}}
		var prev int64
		for _, pol := range []Policy{PolicyDFQ, PolicyCap, PolicyNone, PolicyTimeslice, PolicyDFQ} {
			if err := s.SetPolicy(pol); err != nil {
				t.Fatal(err)
			}
			for range 100 {
				d := s.EndPeriod(p)
				if d.TSys < prev {
					t.Fatalf("t_sys went back: %d < %d", d.TSys, prev)
				}
				prev = d.TSys
				for _, v := range d.VMs {
					if v.Lag < 0 || v.Lag > maxLag || v.VTime < d.TSys || v.ChargedNs < 0 {
						t.Fatalf("%s: %+v", pol, v)
					}
				}
			}
		}
		if prev != math.MaxInt64 {
			t.Errorf("t_sys %d, want saturated", prev)
		}
	})
	t.Run("long run stays relative", func(t *testing.T) {
		m := newModel(t, Config{})
		m.add(1, 1, 0, load{demand: 1, kernel: 10})
		m.add(2, 7, 0, load{demand: 1, kernel: 1})
		m.run(20000)
		// Bounded by the threshold plus one period's advance: VM 1, of weight
		// 1 against a mean of 4, advances up to 4 × 10/11 periods in one.
		for _, v := range m.s.Snapshot() {
			if v.Lag > periodNs+4*periodNs*10/11 {
				t.Errorf("lag grew without bound: %+v", v)
			}
		}
	})
}

func TestCapReturningFromIdleBurstIsBounded(t *testing.T) {
	m := newModel(t, Config{Policy: PolicyCap})
	m.add(1, 1, 0.25, load{})
	m.run(100)
	if st := state(t, m.s, 1); st.CapBalanceNs != int64(0.25*0.75*8*periodNs) {
		t.Fatalf("balance after idling %d", st.CapBalanceNs)
	}
	m.loads[1] = load{demand: 1, kernel: 1}
	m.reset()
	// Window 8, cap 0.25: the banked credit lets it run c·W = 2 periods in
	// a row, plus the one whose overrun triggers the hold.
	inRow := 0
	for !m.held[1] {
		inRow++
		m.step()
	}
	if inRow != 3 {
		t.Errorf("ran %d periods in a row after idling, want 3", inRow)
	}
	if st := state(t, m.s, 1); st.Reason != ReasonCap {
		t.Errorf("reason %q", st.Reason)
	}
	m.run(997)
	if s := m.timeShare(1); s > 0.25+0.002 {
		t.Errorf("long-run share %.4f, cap 0.25", s)
	}
}

func TestConcurrentUse(t *testing.T) {
	s := newSched(t, Config{}, 1, 2)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() {
		for i := range 2000 {
			_ = s.SetWeight(1, uint32(i%7+1))
			_ = s.SetCap(2, float64(i%10)/10)
			_ = s.Snapshot()
		}
	})
	wg.Go(func() {
		for i := range 2000 {
			_ = s.SetPolicy([]Policy{PolicyDFQ, PolicyCap, PolicyTimeslice, PolicyNone}[i%4])
			_ = s.TSys()
		}
	})
	for n := range int64(2000) {
		s.EndPeriod(period(n, busy(1, periodNs*3/4), busy(2, periodNs/4)))
	}
}

// TestSaturationIsSmoothed: one period that looks saturated on a GPU busy
// about two thirds of the time (a poll phase is a short sample) holds
// nobody; saturation that lasts does.
func TestSaturationIsSmoothed(t *testing.T) {
	s := newSched(t, Config{}, 1, 2)
	for n := range int64(10) {
		s.EndPeriod(period(n, busy(1, periodNs/3), busy(2, periodNs/3)))
	}
	d := s.EndPeriod(period(10, busy(1, periodNs)))
	if d.Saturated || len(d.Hold) != 0 {
		t.Fatalf("one busy period after ten at 2/3: saturated %v, held %v", d.Saturated, d.Hold)
	}
	var n int64
	for n = 11; n < 30 && len(d.Hold) == 0; n++ {
		d = s.EndPeriod(period(n, busy(1, periodNs), waiting(2)))
	}
	if !d.Saturated || !slices.Equal(d.Hold, []uint32{1}) {
		t.Fatalf("VM 1 alone on a saturated GPU for %d periods while VM 2 waits: saturated %v, held %v", n-10, d.Saturated, d.Hold)
	}
	if n-10 > 8 {
		t.Errorf("saturation recognised after %d periods, want at most 8", n-10)
	}
}
