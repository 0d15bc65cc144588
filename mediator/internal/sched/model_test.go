package sched

import (
	"maps"
	"slices"
	"testing"
)

// Periods of the tests: a 1 ms poll phase and a 9 ms non-poll phase.
const (
	pollNs    = 1_000_000
	nonPollNs = 9_000_000
	periodNs  = pollNs + nonPollNs
)

// load is a VM's demand in the GPU model.
type load struct {
	// demand is the fraction of the GPU the VM would use alone: 1 saturates
	// it, 0 is idle, in between is a light VM that sleeps between kernels.
	demand float64
	// kernel is the relative length of its kernels: saturating VMs that run
	// together split the GPU in proportion (command-granularity round robin).
	kernel float64
}

// gpuModel is a tiny model of a GPU under the scheduler: each period, light
// VMs that are not held get their demand, saturating ones split the rest by
// kernel length, and held VMs get nothing but stay active (their work waits,
// latched, in their rings). A decision holds for the whole next period.
type gpuModel struct {
	t       *testing.T
	s       *Scheduler
	loads   map[uint32]load
	held    map[uint32]bool
	now     int64
	got     map[uint32]int64 // GPU ns received since reset
	elapsed int64            // ns since reset
	last    Decision
}

func newModel(t *testing.T, cfg Config) *gpuModel {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &gpuModel{t: t, s: s, loads: map[uint32]load{}, held: map[uint32]bool{}, got: map[uint32]int64{}}
}

func (m *gpuModel) add(id, weight uint32, cap float64, l load) {
	m.t.Helper()
	if err := m.s.AddVM(id, weight, cap); err != nil {
		m.t.Fatal(err)
	}
	m.loads[id] = l
}

// charges computes what each VM gets in the coming period.
func (m *gpuModel) charges() []Charge {
	ids := slices.Sorted(maps.Keys(m.loads))
	var light, kernels float64
	for _, id := range ids {
		l := m.loads[id]
		switch {
		case l.demand <= 0 || m.held[id]:
		case l.demand < 1:
			light += l.demand
		default:
			kernels += l.kernel
		}
	}
	scale := 1.0
	if light > 1 {
		scale = 1 / light
	}
	rest := max(0, 1-light)
	var out []Charge
	for _, id := range ids {
		l := m.loads[id]
		if l.demand <= 0 {
			continue
		}
		var share float64
		switch {
		case m.held[id]:
		case l.demand < 1:
			share = l.demand * scale
		default:
			share = rest * l.kernel / kernels
		}
		out = append(out, Charge{VM: id, BusyNs: int64(share * periodNs), Active: true})
	}
	return out
}

func (m *gpuModel) step() Decision {
	cs := m.charges()
	for _, c := range cs {
		m.got[c.VM] += c.BusyNs
	}
	d := m.s.EndPeriod(Period{Start: m.now, End: m.now + periodNs, PollNs: pollNs, NonPollNs: nonPollNs, Charges: cs})
	m.now += periodNs
	m.elapsed += periodNs
	m.held = map[uint32]bool{}
	for _, id := range d.Hold {
		m.held[id] = true
	}
	m.last = d
	return d
}

func (m *gpuModel) run(n int) {
	for range n {
		m.step()
	}
}

// reset starts a new measurement window.
func (m *gpuModel) reset() {
	m.got = map[uint32]int64{}
	m.elapsed = 0
}

// shares returns each VM's fraction of the GPU time handed out since reset.
func (m *gpuModel) shares() map[uint32]float64 {
	var total int64
	for _, g := range m.got {
		total += g
	}
	out := map[uint32]float64{}
	for id := range m.loads {
		if total > 0 {
			out[id] = float64(m.got[id]) / float64(total)
		}
	}
	return out
}

// timeShare returns a VM's fraction of the elapsed time since reset.
func (m *gpuModel) timeShare(id uint32) float64 {
	return float64(m.got[id]) / float64(m.elapsed)
}

// jain is Jain's fairness index of xs.
func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}
