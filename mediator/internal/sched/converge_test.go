package sched

import (
	"math"
	"slices"
	"testing"
)

// The convergence runs: 1000 periods of a saturated GPU on which VM 1 submits
// kernels 10× longer than VM 2's, so that without scheduling it gets 10/11.
func TestConvergence(t *testing.T) {
	skew := map[uint32]load{1: {demand: 1, kernel: 10}, 2: {demand: 1, kernel: 1}}
	tests := []struct {
		name    string
		policy  Policy
		weights map[uint32]uint32
		loads   map[uint32]load
		check   func(t *testing.T, m *gpuModel)
	}{
		{
			name: "none keeps the GPU's 10:1", policy: PolicyNone,
			weights: map[uint32]uint32{1: 1, 2: 1}, loads: skew,
			check: func(t *testing.T, m *gpuModel) {
				sh := m.shares()
				if r := sh[1] / sh[2]; math.Abs(r-10) > 0.1 {
					t.Errorf("ratio %.3f, want 10", r)
				}
			},
		},
		{
			name: "dfq equal weights is fair", policy: PolicyDFQ,
			weights: map[uint32]uint32{1: 1, 2: 1}, loads: skew,
			check: func(t *testing.T, m *gpuModel) {
				sh := m.shares()
				if j := jain([]float64{sh[1], sh[2]}); j < 0.99 {
					t.Errorf("Jain index %.4f, want ≥ 0.99", j)
				} else {
					t.Logf("Jain index %.5f", j)
				}
			},
		},
		{
			name: "dfq weights 1:2:4", policy: PolicyDFQ,
			weights: map[uint32]uint32{1: 1, 2: 2, 3: 4},
			loads:   map[uint32]load{1: {demand: 1, kernel: 10}, 2: {demand: 1, kernel: 3}, 3: {demand: 1, kernel: 1}},
			check: func(t *testing.T, m *gpuModel) {
				sh := m.shares()
				for id, w := range map[uint32]float64{1: 1, 2: 2, 3: 4} {
					want := w / 7
					if e := math.Abs(sh[id]-want) / want; e > 0.03 {
						t.Errorf("VM %d share %.4f, want %.4f (error %.2f%%)", id, sh[id], want, 100*e)
					}
				}
				xs := []float64{sh[1] / 1, sh[2] / 2, sh[3] / 4}
				t.Logf("Jain index on share/weight %.5f", jain(xs))
			},
		},
		{
			name: "cap 0.3 alone", policy: PolicyCap,
			weights: map[uint32]uint32{1: 1}, loads: map[uint32]load{1: {demand: 1, kernel: 1}},
			check: func(t *testing.T, m *gpuModel) {
				if s := m.timeShare(1); s > 0.3+0.002 || s < 0.3-0.01 {
					t.Errorf("capped VM got %.4f of the time, want 0.3", s)
				}
			},
		},
		{
			name: "cap 0.3 next to an uncapped VM", policy: PolicyCap,
			weights: map[uint32]uint32{1: 1, 2: 1}, loads: map[uint32]load{1: {demand: 1, kernel: 10}, 2: {demand: 1, kernel: 1}},
			check: func(t *testing.T, m *gpuModel) {
				if s := m.timeShare(1); s > 0.3+0.002 || s < 0.3-0.01 {
					t.Errorf("capped VM got %.4f of the time, want 0.3", s)
				}
				if s := m.timeShare(2); s < 0.69 {
					t.Errorf("uncapped VM got %.4f of the time, want the rest", s)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newModel(t, Config{Policy: tt.policy})
			for _, id := range []uint32{1, 2, 3} {
				if w, ok := tt.weights[id]; ok {
					c := 0.0
					if tt.policy == PolicyCap && id == 1 {
						c = 0.3
					}
					m.add(id, w, c, tt.loads[id])
				}
			}
			for range 1000 {
				d := m.step()
				checkDFQHolds(t, m, d)
			}
			logShares(t, m)
			tt.check(t, m)
		})
	}
}

// checkDFQHolds checks that under dfq exactly the VMs ahead by more than the
// threshold are held: a hog is held in the very period it gets there.
func checkDFQHolds(t *testing.T, m *gpuModel, d Decision) {
	t.Helper()
	if d.Policy != PolicyDFQ {
		return
	}
	for _, st := range d.VMs {
		if want := st.Lag > d.Threshold; st.Held != want {
			t.Fatalf("at %d: VM %d lag %d threshold %d held %v", m.now, st.ID, st.Lag, d.Threshold, st.Held)
		}
	}
}

func logShares(t *testing.T, m *gpuModel) {
	t.Helper()
	sh := m.shares()
	for _, id := range []uint32{1, 2, 3} {
		if _, ok := m.loads[id]; ok {
			t.Logf("VM %d: %.4f of the GPU time handed out, %.4f of the elapsed time", id, sh[id], m.timeShare(id))
		}
	}
}

func TestHogHeldWithinOnePeriod(t *testing.T) {
	m := newModel(t, Config{})
	m.add(1, 1, 0, load{demand: 1, kernel: 10})
	m.add(2, 1, 0, load{demand: 1, kernel: 1})
	// Period 1: the hog gets 10/11 of 10 ms, 8.2 ms ahead, beyond the
	// default threshold (a quarter period, 2.5 ms): held at once.
	d := m.step()
	if !slices.Equal(d.Hold, []uint32{1}) || d.Threshold != periodNs/DefaultThresholdDiv {
		t.Fatalf("period 1: held %v, want [1], threshold %d; %+v", d.Hold, d.Threshold, d.VMs)
	}
	if d.VMs[0].Reason != ReasonAhead {
		t.Errorf("reason %q", d.VMs[0].Reason)
	}
}

func TestTimesliceRoundRobin(t *testing.T) {
	m := newModel(t, Config{Policy: PolicyTimeslice})
	m.add(1, 1, 0, load{demand: 1, kernel: 10})
	m.add(2, 2, 0, load{demand: 1, kernel: 1})
	m.add(3, 1, 0, load{demand: 1, kernel: 1})
	m.add(4, 1, 0, load{}) // idle: held too, so it would wait its turn
	runner := func(d Decision) uint32 {
		var r []uint32
		for _, st := range d.VMs {
			if !st.Held {
				r = append(r, st.ID)
			}
		}
		if len(r) != 1 {
			t.Fatalf("running %v, want exactly one", r)
		}
		return r[0]
	}
	var order []uint32
	for range 8 {
		order = append(order, runner(m.step()))
	}
	if want := []uint32{1, 2, 2, 3, 1, 2, 2, 3}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	m.run(1) // VM 1's turn, period 9
	m.loads[3] = load{}
	order = order[:0]
	for range 6 {
		order = append(order, runner(m.step()))
	}
	// VM 3 went idle: skipped.
	if want := []uint32{2, 2, 1, 2, 2, 1}; !slices.Equal(order, want) {
		t.Fatalf("order after VM 3 went idle %v, want %v", order, want)
	}
	sh := m.shares()
	t.Logf("timeslice shares: %.3f %.3f %.3f", sh[1], sh[2], sh[3])
}
