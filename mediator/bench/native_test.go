package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend/cuda"
)

func TestNativePlan(t *testing.T) {
	s := parse(t, "backend: cuda\nclock: wall\nduration: 2s\n"+`vms:
  - name: multi
    channels: 4
    workload: {kind: throttle, kernel_us: 4000, depth: 2}
  - name: eq
    count: 2
    workload: {kind: throttle, kernel_us: 5, sleep_us: 7, start: 10ms, on: 100ms, off: 50ms}
  - name: job
    workload: {kind: app, kernels: 30, kernel_us: 37}
`)
	p := nativePlan(s)
	want := cuda.NativePlan{DurationNs: int64(2 * time.Second), VMs: []cuda.NativeVM{
		{Name: "multi", Streams: 4, Depth: 2, KernelNs: 4_000_000},
		{Name: "eq-0", Streams: 1, Depth: 1, KernelNs: 5000, SleepNs: 7000, StartNs: 10e6, OnNs: 100e6, OffNs: 50e6},
		{Name: "eq-1", Streams: 1, Depth: 1, KernelNs: 5000, SleepNs: 7000, StartNs: 10e6, OnNs: 100e6, OffNs: 50e6},
		{Name: "job", Streams: 1, Depth: 1, KernelNs: 37_000, Kernels: 30},
	}}
	got, _ := json.Marshal(p)
	exp, _ := json.Marshal(want)
	if string(got) != string(exp) {
		t.Errorf("plan\n got %s\nwant %s", got, exp)
	}
	if err := p.Validate(); err != nil {
		t.Error(err)
	}
}

func TestAttachNative(t *testing.T) {
	res := &Result{Backend: "cuda", DurationNs: 2e9, GPUBusyNs: 1.8e9, Kernels: 3000, VMs: []VMResult{
		{Name: "a", Kind: "throttle", Kernels: 2000, LatencyP99Ns: 300e3},
		{Name: "job", Kind: "app", Kernels: 1000, TurnaroundNs: 1e9},
	}}
	nr := &cuda.NativeResult{Device: "GPU", DurationNs: 2e9, GPUBusyNs: 3e9, GPUSpanNs: 1.9e9, Kernels: 6000,
		VMs: []cuda.NativeVMResult{
			{Name: "a", Kernels: 5000, GPUNs: 2e9, LatencyP50Ns: 100e3, LatencyP99Ns: 200e3},
			{Name: "job", Kernels: 1000, GPUNs: 1e9, TurnaroundNs: 0.5e9},
		}}
	if err := attachNative(res, nr); err != nil {
		t.Fatal(err)
	}
	n := res.Native
	near := func(what string, got *float64, want float64) {
		t.Helper()
		if got == nil || math.Abs(*got-want) > 1e-9 {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	if n.KernelsPerSec != 3000 || n.Utilization != 1.5 || n.Occupancy != 0.95 {
		t.Errorf("native %+v", n)
	}
	near("vs_native", n.VsNative, 0.5)          // 1500/s against 3000/s
	near("vs_native_busy", n.VsNativeBusy, 0.6) // 0.9 s/s against 1.5 s/s
	a, job := res.VMs[0].Native, res.VMs[1].Native
	if a.KernelsPerSec != 2500 || job.KernelsPerSec != 2000 {
		t.Errorf("rates: %+v %+v", a, job)
	}
	near("a vs_native", a.VsNative, 1000.0/2500)
	near("job vs_native", job.VsNative, 1000.0/2000) // over the turnarounds
	var b strings.Builder
	if err := WriteText(&b, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"native baseline on GPU", "kernels/s 0.500, GPU busy 0.600", "SLUICE/NATIVE", "0.400", "500.000ms"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	// A native result of other VMs is refused.
	nr.VMs[1].Name = "other"
	if err := attachNative(&Result{VMs: []VMResult{{Name: "a"}, {Name: "job"}}}, nr); err == nil {
		t.Error("attachNative of another VM's figures succeeded")
	}
	if err := attachNative(&Result{VMs: []VMResult{{Name: "a"}}}, nr); err == nil {
		t.Error("attachNative of another number of VMs succeeded")
	}
	// No native kernels: no ratio.
	zero := &Result{VMs: []VMResult{{Name: "a", Kernels: 5}}, DurationNs: 1}
	if err := attachNative(zero, &cuda.NativeResult{VMs: []cuda.NativeVMResult{{Name: "a"}}}); err != nil {
		t.Fatal(err)
	}
	if zero.Native.VsNative != nil || zero.VMs[0].Native.VsNative != nil {
		t.Errorf("ratios without native kernels: %+v", zero.Native)
	}
}

// TestSimHasNoNative: the sim has no native run; the field is left out.
func TestSimHasNoNative(t *testing.T) {
	r := run(t, "duration: 50ms\nvms:\n  - name: a\n    workload: {kind: throttle, kernel_us: 100}\n")
	if r.Native != nil || r.VMs[0].Native != nil {
		t.Fatalf("native figures on the sim: %+v", r.Native)
	}
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), `"native"`) {
		t.Errorf("JSON of a sim run mentions native: %s", out)
	}
	var b strings.Builder
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "native") {
		t.Errorf("text of a sim run mentions native:\n%s", b.String())
	}
}
