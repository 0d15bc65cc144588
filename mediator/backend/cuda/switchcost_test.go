package cuda

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// nearF: within a few ns of float rounding.
func nearF(a int64, b float64) bool { return math.Abs(float64(a)-b) <= 4 }

// TestSwitchOverheadTakenWhereVMsOverlap: with f set, a half interval at
// whose end two VMs ran bills (1-f) of it split between them and f of it
// to nobody (SwitchOverhead); a half with one VM running bills it all, as
// without f. Bills and overhead add up to the time anything ran at a
// sweep's end.
func TestSwitchOverheadTakenWhereVMsOverlap(t *testing.T) {
	const f = 0.1
	tl := newTimeline([]int{1, 1}, 1)
	tl.b.setSwitchOverhead(f)
	t0 := tl.b.lastSweep
	tl.mark(0, 0, 1, 0) // A starts
	t1, _ := tl.sweep()
	tl.mark(1, 0, 1, 0) // B starts
	t2, _ := tl.sweep()
	t3, _ := tl.sweep() // both run throughout
	tl.mark(0, 0, 1, 1) // A ends
	t4, got := tl.sweep()
	as := got[1]
	tl.mark(1, 0, 1, 1) // B ends
	t5, got := tl.sweep()
	bs := got[2]
	d0, d1, d2, d3, d4 := float64(t1-t0), float64(t2-t1), float64(t3-t2), float64(t4-t3), float64(t5-t4)
	if want := d0/2 + d1/2 + (1-f)*(d1/4+d2/2+d3/4); len(as) != 1 || !nearF(as[0].GPUNs, want) {
		t.Fatalf("A: %+v, want GPUNs %.0f", as, want)
	}
	if want := (1-f)*(d1/4+d2/2+d3/4) + d3/2 + d4/2; len(bs) != 1 || !nearF(bs[0].GPUNs, want) {
		t.Fatalf("B: %+v, want GPUNs %.0f", bs, want)
	}
	ns, frac := tl.b.SwitchOverhead()
	if want := f * (d1/2 + d2 + d3/2); frac != f || !nearF(ns, want) {
		t.Errorf("switch overhead %d ns at %g, want %.0f ns at %g", ns, frac, want, f)
	}
	if sum, want := as[0].GPUNs+bs[0].GPUNs+ns, d0/2+d1+d2+d3+d4/2; !nearF(sum, want) {
		t.Errorf("bills and overhead add up to %d, want %.0f", sum, want)
	}
}

// TestSwitchOverheadNotTakenFromOneVM: one VM running alone is billed its
// whole time, whatever f.
func TestSwitchOverheadNotTakenFromOneVM(t *testing.T) {
	tl := newTimeline([]int{1, 1}, 1)
	tl.b.setSwitchOverhead(0.2)
	t0 := tl.b.lastSweep
	tl.mark(0, 0, 1, 0)
	t1, _ := tl.sweep()
	t2, _ := tl.sweep()
	tl.mark(0, 0, 1, 1)
	t3, got := tl.sweep()
	if as, want := got[1], (t1-t0)/2+(t2-t1)+(t3-t2)/2; len(as) != 1 || !near(as[0].GPUNs, want) {
		t.Fatalf("A alone: %+v, want GPUNs %d", as, want)
	}
	if ns, _ := tl.b.SwitchOverhead(); ns != 0 {
		t.Errorf("switch overhead %d ns with one VM running, want 0", ns)
	}
}

// TestSwitchOverheadOption: "auto" asks Open to measure it; a fraction in
// [0, 0.5) sets it; anything else is refused, naming the option. Without
// the option the internal open measures nothing and f is 0.
func TestSwitchOverheadOption(t *testing.T) {
	for _, c := range []struct {
		v    string
		f    float64
		auto bool
	}{{"auto", 0, true}, {"0.065", 0.065, false}, {"0", 0, false}} {
		b, err := open(newFake(), backend.Options{Params: map[string]string{"switch_overhead": c.v}}, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.v, err)
		}
		if _, f := b.SwitchOverhead(); f != c.f || b.switchAuto != c.auto {
			t.Errorf("%s: f %g auto %v, want %g %v", c.v, f, b.switchAuto, c.f, c.auto)
		}
		_ = b.Close()
	}
	for _, v := range []string{"-0.1", "0.5", "1", "NaN", "6.5%", ""} {
		_, err := open(newFake(), backend.Options{Params: map[string]string{"switch_overhead": v}}, nil)
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), "switch_overhead") {
			t.Errorf("%q: %v, want ErrInvalid naming switch_overhead", v, err)
		}
	}
	b, err := open(newFake(), backend.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, f := b.SwitchOverhead(); f != 0 || b.switchAuto {
		t.Errorf("no option: f %g auto %v, want 0 false", f, b.switchAuto)
	}
}

// TestSwitchOverheadOf: f is 1 less the probes' running time over the
// union of their spans; probes that did not overlap, records that cannot
// be (ran past their span, nothing ran) and a nonsense f are errors; a
// sum past the union (rounding) is 0.
func TestSwitchOverheadOf(t *testing.T) {
	// Two 45 ns kernels over [0, 110]: 20 ns of the span ran neither.
	f, err := switchOverheadOf([]truthIval{{0, 100, 45}, {10, 110, 45}})
	if want := 1 - 90.0/110; err != nil || math.Abs(f-want) > 1e-12 {
		t.Errorf("overlapping probes: f %g, %v; want %g", f, err, want)
	}
	f, err = switchOverheadOf([]truthIval{{0, 100, 51}, {0, 100, 50}})
	if err != nil || f != 0 {
		t.Errorf("kernels' time past the union: f %g, %v; want 0", f, err)
	}
	for name, probes := range map[string][]truthIval{
		"one record":      {{0, 100, 50}},
		"one after other": {{0, 100, 100}, {100, 200, 100}},
		"ran past span":   {{0, 100, 150}, {0, 100, 10}},
		"ran nothing":     {{0, 100, 0}, {0, 100, 50}},
		"empty span":      {{100, 100, 1}, {0, 200, 50}},
		"mostly nobody's": {{0, 100, 20}, {0, 100, 20}},
	} {
		if f, err := switchOverheadOf(probes); !errors.Is(err, errProbe) {
			t.Errorf("%s: f %g, %v; want errProbe", name, f, err)
		}
	}
}

// TestCalibrateFallsBack: the calibration runs its probes through the
// backend's own workers and reads their records; the fake driver runs
// them one after the other (one timer), which measures nothing: f is 0,
// Open's calibrate says so and leaves no probe VM behind. The probes keep
// their records without KeepGroundTruth, which Open's calibration runs
// before anyone can call (without them it found "0 records" and f was 0 on
// every GPU).
func TestCalibrateFallsBack(t *testing.T) {
	r := newRig(t, map[string]string{"switch_overhead": "0.2"})
	r.b.keepTruth.Store(false) // as sluiced opens it: the probes keep their records all the same
	_, err := r.b.measureSwitchOverhead(1_000_000, 10*time.Second)
	if !errors.Is(err, errProbe) || !strings.Contains(err.Error(), "did not run at once") {
		t.Fatalf("calibrating on the fake: %v, want errProbe: the probes did not run at once", err)
	}
	r.b.calibrate()
	if _, f := r.b.SwitchOverhead(); f != 0 {
		t.Errorf("f %g after a failed calibration, want 0", f)
	}
	r.b.mu.Lock()
	left := len(r.b.vms)
	r.b.mu.Unlock()
	if left != 0 {
		t.Errorf("%d probe VMs left attached", left)
	}
	// The probes' IDs are free again: a second calibration attaches them.
	if _, err := r.b.measureSwitchOverhead(1_000_000, 10*time.Second); !errors.Is(err, errProbe) {
		t.Errorf("a second calibration: %v", err)
	}
}
