package bench

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/bench/spec"
)

func parse(t *testing.T, yaml string) spec.Spec {
	t.Helper()
	s, err := spec.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func run(t *testing.T, yaml string) *Result {
	t.Helper()
	r, err := Run(context.Background(), parse(t, yaml), Options{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func vmNamed(t *testing.T, r *Result, name string) VMResult {
	t.Helper()
	for _, v := range r.VMs {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no vm %q in %+v", name, r.VMs)
	return VMResult{}
}

// mixed is a spec of every kind of workload, for accounting acc and policy
// pol, with short periods so that holds come and go.
func mixed(acc, pol string) string {
	return "duration: 300ms\naccounting: " + acc + "\npolicy: " + pol + "\n" +
		"tuning: {poll_ratio: 4, neon_window: 1ms}\n" + mixedVMs
}

const mixedVMs = `vms:
  - name: short
    workload: {kind: throttle, kernel_us: 100}
  - name: long
    workload: {kind: throttle, kernel_us: 1000, depth: 4}
  - name: app
    workload: {kind: app, kernels: 100, kernel_us: 500, sleep_us: 200}
  - name: bursty
    workload: {kind: throttle, kernel_us: 50, sleep_us: 50, on: 20ms, off: 30ms, start: 10ms}
`

// canonical is r's JSON without the fields that measure this process.
func canonical(t *testing.T, r *Result) string {
	t.Helper()
	c := *r
	c.WallNs, c.EstimatorNs = 0, 0
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDeterministic(t *testing.T) {
	for _, acc := range []string{"loga", "loga-segment-average", "neon-sampling", "off"} {
		t.Run(acc, func(t *testing.T) {
			pol := "dfq"
			if acc == "off" {
				pol = "none"
			}
			y := mixed(acc, pol)
			a, b := canonical(t, run(t, y)), canonical(t, run(t, y))
			if a != b {
				t.Fatalf("two runs differ:\n%s\n%s", a, b)
			}
		})
	}
}

func TestJSONFields(t *testing.T) {
	r := run(t, mixed("loga", "dfq"))
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"duration_ns", "gpu_busy_ns", "utilization", "jain_index", "poller_cpu_ns",
		"periods", "wall_ns", "vms", "accounting_error_max", "kernels"} {
		if _, ok := m[k]; !ok {
			t.Errorf("top-level key %q missing", k)
		}
	}
	vms := m["vms"].([]any)
	if len(vms) != 4 {
		t.Fatalf("%d vms", len(vms))
	}
	for _, v := range vms {
		for _, k := range []string{"name", "weight", "true_gpu_ns", "accounted_gpu_ns", "estimated_gpu_ns", "share",
			"kernels", "turnaround_ns", "held_back_ns", "accounting_error", "estimate_error"} {
			if _, ok := v.(map[string]any)[k]; !ok {
				t.Errorf("vm key %q missing in %v", k, v)
			}
		}
	}
	if r.DurationNs < 300e6 || r.GPUBusyNs <= 0 || r.GPUBusyNs > r.DurationNs || r.Periods == 0 || r.PollerCPUNs <= 0 {
		t.Errorf("implausible result %+v", r)
	}
	var sum float64
	for _, v := range r.VMs {
		sum += v.Share
		if v.Kernels == 0 || v.TrueGPUNs == 0 || v.AccountingError == nil {
			t.Errorf("vm %+v did no work or has no accounting error", v)
		}
		// The exact meter: completed commands plus the running ones from
		// their start.
		if v.AccountedGPUNs != v.TrueGPUNs {
			t.Errorf("vm %s: accounted %d, true %d", v.Name, v.AccountedGPUNs, v.TrueGPUNs)
		}
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("shares add up to %v", sum)
	}
	if app := vmNamed(t, r, "app"); app.TurnaroundNs < 100*700_000-200_000 || app.Kernels != 100 {
		t.Errorf("app %+v", app)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       error
	}{
		{"off with dfq", "duration: 1s\naccounting: off\npolicy: dfq\nvms: [{name: a, workload: {kind: throttle, kernel_us: 1}}]", ErrUnsupported},
		{"off with cap", "duration: 1s\naccounting: off\npolicy: cap\nvms: [{name: a, workload: {kind: throttle, kernel_us: 1}}]", ErrUnsupported},
		{"cuda without a GPU", "duration: 1s\nbackend: cuda\nclock: wall\nvms: [{name: a, workload: {kind: throttle, kernel_us: 1}}]", ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "cuda without a GPU" {
				if b, err := backend.Open("cuda", backend.Options{}); err == nil {
					_ = b.Close()
					t.Skip("this machine has a GPU")
				}
			}
			_, err := Run(context.Background(), parse(t, tt.yaml), Options{})
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := Run(context.Background(), spec.Spec{}, Options{}); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("empty spec: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, parse(t, mixed("loga", "dfq")), Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled run: %v", err)
	}
}

// Guests drive the rings as specified: exact timelines for one VM alone.
func TestWorkloadTimelines(t *testing.T) {
	tests := []struct {
		name, workload string
		turnaround     int64
	}{
		{"back to back", "{kind: app, kernels: 100, kernel_us: 100}", 100 * 100_000},
		{"with sleeps", "{kind: app, kernels: 100, kernel_us: 100, sleep_us: 100}", 100*100_000 + 99*100_000},
		{"depth hides sleeps", "{kind: app, kernels: 100, kernel_us: 100, sleep_us: 100, depth: 4}", 100 * 100_000},
		{"two channels", "{kind: app, kernels: 100, kernel_us: 100}", 100 * 100_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chans := ""
			if tt.name == "two channels" {
				chans = "channels: 2, "
			}
			r := run(t, "accounting: off\npolicy: none\nvms: [{name: a, "+chans+"workload: "+tt.workload+"}]")
			if v := r.VMs[0]; v.TurnaroundNs != tt.turnaround || v.Kernels != 100 || v.TrueGPUNs != 100*100_000 {
				t.Errorf("got %+v, want turnaround %d", v, tt.turnaround)
			}
		})
	}
}

func TestStartAndBursts(t *testing.T) {
	r := run(t, `
duration: 1s
accounting: off
policy: none
vms:
  - name: late
    workload: {kind: throttle, kernel_us: 1000, start: 600ms}
  - name: bursty
    workload: {kind: throttle, kernel_us: 1000, on: 100ms, off: 100ms}
`)
	late, bursty := vmNamed(t, r, "late"), vmNamed(t, r, "bursty")
	// late runs in [600 ms, 1 s): alone in [700, 800) and [900, 1000), half
	// of the GPU in bursty's on stretches [600, 700) and [800, 900).
	if late.Kernels < 295 || late.Kernels > 305 {
		t.Errorf("late completed %d kernels, want about 300", late.Kernels)
	}
	// bursty is on for 500 ms of the second, 200 ms of it at half speed.
	if bursty.Kernels < 395 || bursty.Kernels > 405 {
		t.Errorf("bursty completed %d kernels, want about 400", bursty.Kernels)
	}
	if late.StartNs != 600e6 || math.Abs(bursty.Demand-0.5) > 1e-9 {
		t.Errorf("start %d, demand %v", late.StartNs, bursty.Demand)
	}
}

func TestJain(t *testing.T) {
	for _, tt := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 1}, {[]float64{3}, 1}, {[]float64{1, 1, 1}, 1}, {[]float64{1, 0}, 0.5}, {[]float64{1, 3}, 0.8},
	} {
		if got := jain(tt.xs); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("jain(%v) = %v, want %v", tt.xs, got, tt.want)
		}
	}
	r := &Result{VMs: []VMResult{
		{Name: "a", Weight: 1, Demand: 1, FairShare: 0.25, TrueGPUNs: 100},
		{Name: "b", Weight: 2, Demand: 1, FairShare: 0.5, TrueGPUNs: 200},
		{Name: "light", Weight: 1, Demand: 0.1, FairShare: 0.25, TrueGPUNs: 1},
	}}
	r.fairness()
	if r.JainIndex != 1 || !reflect.DeepEqual(r.JainVMs, []string{"a", "b"}) {
		t.Errorf("weighted Jain %v over %v", r.JainIndex, r.JainVMs)
	}
}

func TestRingEntries(t *testing.T) {
	for depth, want := range map[int]int{1: 64, 64: 64, 65: 128, 256: 256, 4096: 4096} {
		if got := ringEntries(depth); got != want {
			t.Errorf("ringEntries(%d) = %d, want %d", depth, got, want)
		}
	}
}

func TestWallClock(t *testing.T) {
	if testing.Short() {
		t.Skip("runs in real time")
	}
	for _, acc := range []string{"loga", "neon-sampling"} {
		r := run(t, "clock: wall\nduration: 100ms\naccounting: "+acc+
			"\nvms: [{name: a, workload: {kind: throttle, kernel_us: 200}}, {name: b, workload: {kind: app, kernels: 20, kernel_us: 100}}]")
		if r.Clock != "wall" || r.DurationNs < 100e6 || r.VMs[0].Kernels == 0 || r.VMs[1].Kernels != 20 {
			t.Errorf("%s: %+v", acc, r)
		}
	}
}

// TestTurnsOneVMInFlight: under arbitration turns without a hand-off the
// harness's checker never sees two VMs with commands on the sim at once;
// with the default hand-off it sees two (the next holder's queued behind
// the last one's last work), never three; under driver it sees several
// (the checker can fail). Turns are fair here (Jain ≥ 0.99).
func TestTurnsOneVMInFlight(t *testing.T) {
	for _, arb := range []string{"turns, handoff: -1ms", "turns", "driver"} {
		t.Run(arb, func(t *testing.T) {
			r := run(t, "duration: 2s\npolicy: dfq\ntuning: {arbitration: "+arb+"}\nvms:\n"+
				"  - name: multi\n    channels: 4\n    workload: {kind: throttle, kernel_us: 4000, depth: 2}\n"+
				"  - name: short\n    workload: {kind: throttle, kernel_us: 20, depth: 16}\n"+
				"  - name: mid\n    workload: {kind: throttle, kernel_us: 300, depth: 4}\n")
			if arb == "turns, handoff: -1ms" && (r.MaxVMsInFlight != 1 || r.Arbitration != "turns") {
				t.Fatalf("turns: %d VMs in flight at once (arbitration %q), want 1", r.MaxVMsInFlight, r.Arbitration)
			}
			if arb == "turns" && r.MaxVMsInFlight != 2 {
				t.Fatalf("turns with the default hand-off: %d VMs in flight at once, want 2", r.MaxVMsInFlight)
			}
			if arb == "driver" && r.MaxVMsInFlight < 2 {
				t.Fatalf("driver: the checker saw %d VMs in flight at once", r.MaxVMsInFlight)
			}
			if arb != "driver" && r.JainIndex < 0.99 {
				t.Fatalf("turns: Jain %.4f", r.JainIndex)
			}
		})
	}
}

// TestAuto: under arbitration auto a saturating mix (a VM on 4 channels of
// 4 ms kernels, one of 20 µs kernels 16 deep, a bursty one) goes to turns
// at the first period and stays: fair (Jain ≥ 0.99, where the driver's
// time slicing gives it 0.76 on the sim) and billed exactly; a mix of
// closed loops that sleep (nooveruse: nobody over-uses) stays in the
// driver's arbitration throughout and loses nothing against it.
func TestAuto(t *testing.T) {
	sat := "duration: 2s\npolicy: dfq\ntuning: {arbitration: auto}\nvms:\n" +
		"  - name: multi\n    channels: 4\n    workload: {kind: throttle, kernel_us: 4000, depth: 2}\n" +
		"  - name: short\n    workload: {kind: throttle, kernel_us: 20, depth: 16}\n" +
		"  - name: bursty\n    workload: {kind: throttle, kernel_us: 500, depth: 4, on: 50ms, off: 50ms}\n"
	r := run(t, sat)
	if r.Arbitration != "auto" || r.ArbitrationInForce != "turns" || r.ArbitrationSwitches == nil ||
		*r.ArbitrationSwitches != 1 || *r.TurnsPeriods < uint64(r.Periods)-2 {
		t.Fatalf("saturating mix: arbitration %q, in force %q, switches %v, %v of %d periods under turns; want turns from the first period on",
			r.Arbitration, r.ArbitrationInForce, r.ArbitrationSwitches, r.TurnsPeriods, r.Periods)
	}
	if r.JainIndex < 0.99 || r.AccountingErrorMax == nil || *r.AccountingErrorMax > 0.001 {
		t.Fatalf("saturating mix under auto: Jain %.4f, bill error max %v", r.JainIndex, r.AccountingErrorMax)
	}
	for _, name := range []string{"multi", "short"} {
		if o := vmNamed(t, r, name).Outstanding; o == nil || *o < 0.99 || *o > 1 {
			t.Fatalf("saturating vm %s: outstanding %v, want all the time", name, o)
		}
	}
	sleepy := "duration: 2s\npolicy: dfq\ntuning: {arbitration: ARB}\nvms:\n" +
		"  - name: short\n    count: 2\n    workload: {kind: throttle, kernel_us: 100, sleep_us: 400}\n" +
		"  - name: long\n    count: 2\n    workload: {kind: throttle, kernel_us: 1000, sleep_us: 4000}\n"
	a := run(t, strings.ReplaceAll(sleepy, "ARB", "auto"))
	d := run(t, strings.ReplaceAll(sleepy, "ARB", "driver"))
	if a.ArbitrationInForce != "driver" || a.ArbitrationSwitches == nil || *a.ArbitrationSwitches != 0 {
		t.Fatalf("sleepy mix: in force %q, switches %v; want the driver throughout", a.ArbitrationInForce, a.ArbitrationSwitches)
	}
	for _, v := range a.VMs {
		if v.Outstanding == nil || *v.Outstanding < 0.1 || *v.Outstanding > 0.6 {
			t.Fatalf("sleepy vm %s: outstanding %v, want its kernels' and waits' share, under the threshold", v.Name, v.Outstanding)
		}
	}
	if d.VMs[0].Outstanding != nil {
		t.Fatal("outstanding reported under the driver: it is counted under auto only")
	}
	if a.Kernels != d.Kernels || a.GPUBusyNs != d.GPUBusyNs {
		t.Fatalf("sleepy mix: auto %d kernels, %d ns busy; driver %d, %d", a.Kernels, a.GPUBusyNs, d.Kernels, d.GPUBusyNs)
	}
}
