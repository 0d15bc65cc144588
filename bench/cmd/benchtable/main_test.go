package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/bench"
)

func result(spec, acc string, turnaround int64, vms ...bench.VMResult) *bench.Result {
	r := &bench.Result{Spec: spec, Accounting: acc, Policy: "none", DurationNs: 1e9, Utilization: 0.5,
		JainIndex: 1, PollerCPUFraction: 0.019, VMs: vms}
	if turnaround > 0 {
		r.VMs = append(r.VMs, bench.VMResult{Name: "app", Kind: "app", TurnaroundNs: turnaround, Share: 0.5})
	}
	return r
}

func TestWrite(t *testing.T) {
	e, zero, big := 0.002, 0.0, 0.05
	hold := int64(600e6)
	rs := []*bench.Result{
		result("overhead-10us-off", "off", 1000e6, bench.VMResult{Name: "throttle-0", Share: 0.25}, bench.VMResult{Name: "throttle-1", Share: 0.25}),
		result("overhead-10us-loga", "loga", 1001e6),
		result("overhead-10us-neon", "neon-sampling", 1200e6),
		{Spec: "load-30pct", Accounting: "loga", AccountingErrorMax: &zero, EstimateErrorMax: &e},
		{Spec: "bursty-dfq", Accounting: "loga", AccountingErrorMax: &zero, EstimateErrorMax: &big},
		{Spec: "hog-dfq", MeanPeriodNs: 100e6, VMs: []bench.VMResult{{Name: "hog", StartNs: 500e6, FirstHeldNs: &hold}}},
		{Spec: "weights-dfq", VMs: []bench.VMResult{{Name: "w1", Weight: 1, Share: 0.15}, {Name: "w2", Weight: 3, Share: 0.85}}},
	}
	dir := t.TempDir()
	var paths []string
	for _, r := range rs {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, r.Spec+".json")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	loaded, err := load(paths)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := write(&b, loaded); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| overhead-10us-off | off | none | 1000.0 ms | 1.0000 | throttle ×2 25.0%, app 50.0% |",
		"| 10us | 1000.0 ms | 1001.0 ms | 1200.0 ms | 1.0010 | 1.2000 |",
		"| overhead 10us: app turnaround, loga vs off | ≤ 0.5% | +0.100% | yes |",
		"| poller CPU, 10us (11 VMs) | ≤ 2% of a core | 1.900% | yes |",
		"| kernel length and load measured by polling, 1 specs (polling all the time) | within 1% | worst 0.2000% (load-30pct) | yes |",
		"| accounted vs true per VM (loga: exact meter), 2 specs | within 1% | worst 0.00% (load-30pct) | yes |",
		"| sampling estimate vs true per VM (loga, scheduling input), 2 specs | reported | worst 5.00% (bursty-dfq) (polling 1.9% of the time: the error shrinks as 1/√periods) | — |",
		"| hog-dfq: hog held back | ≤ 1 period | 1.00 periods (100.0 ms after arriving, period 100.0 ms) | yes |",
		"w1 15.0% (target 25.0%), w2 85.0% (target 75.0%) | no |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := load([]string{filepath.Join(dir, "missing.json")}); err == nil {
		t.Error("missing file accepted")
	}
}

func TestWriteNative(t *testing.T) {
	half, two := 0.5, 2.0
	gpu := &bench.Result{Spec: "equal8-dfq", Backend: "cuda", Clock: "wall", DurationNs: 2e9, Kernels: 3000,
		Native: &bench.NativeResult{KernelsPerSec: 3000, Occupancy: 0.97, VsNative: &half, VsNativeBusy: &two},
		VMs:    []bench.VMResult{{Name: "vm-0", Native: &bench.NativeVM{VsNative: &half}}, {Name: "vm-1", Native: &bench.NativeVM{}}}}
	var b strings.Builder
	if err := write(&b, []*bench.Result{result("skew-dfq", "loga", 0), gpu}); err != nil {
		t.Fatal(err)
	}
	want := "| equal8-dfq | 1500 | 3000 | 0.500 | 2.000 | 97.00% | vm-0 0.500, vm-1 - |"
	if out := b.String(); !strings.Contains(out, want) || strings.Count(out, "| skew-dfq |") != 1 {
		t.Errorf("output lacks %q (or tables skew-dfq beside native):\n%s", want, out)
	}
	b.Reset()
	if err := write(&b, []*bench.Result{result("skew-dfq", "loga", 0)}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "native") {
		t.Errorf("a table without native results mentions it:\n%s", b.String())
	}
}

// TestHogTargetUnderTurns: a hog never held is a miss under the driver's
// arbitration; under turns (auto with periods under turns), where dfq's
// holds of a VM running ahead do not bind, it is judged by its share.
func TestHogTargetUnderTurns(t *testing.T) {
	periods := uint64(40)
	hog := func(share float64) []bench.VMResult {
		return []bench.VMResult{{Name: "hog", Share: share}, {Name: "a", Share: (1 - share) / 3}, {Name: "b"}, {Name: "c"}}
	}
	for _, c := range []struct {
		r    bench.Result
		pass bool
	}{
		{bench.Result{MeanPeriodNs: 30e6, VMs: hog(0.25)}, false},
		{bench.Result{MeanPeriodNs: 30e6, Arbitration: "auto", TurnsPeriods: &periods, VMs: hog(0.25)}, true},
		{bench.Result{MeanPeriodNs: 30e6, Arbitration: "turns", VMs: hog(0.25)}, true},
		{bench.Result{MeanPeriodNs: 30e6, Arbitration: "auto", TurnsPeriods: &periods, VMs: hog(0.40)}, false},
	} {
		tg := hogTarget(&c.r)
		if tg.met != c.pass {
			t.Errorf("arbitration %q, hog share %.2f: %+v, want met %v", c.r.Arbitration, c.r.VMs[0].Share, tg, c.pass)
		}
	}
}
