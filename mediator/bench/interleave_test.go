package bench

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/backend/cuda"
)

// fakeSides gives each round's Sluice and native runs the rates in sk and
// nk (kernels over 1 s) and records the order they ran in.
func fakeSides(sk, nk []int64, order *[]string) sides {
	var si, ni int
	return sides{
		sluice: func(context.Context) (*Result, error) {
			*order = append(*order, "S")
			k := sk[si]
			si++
			e := float64(si) / 100
			return &Result{DurationNs: 1e9, Kernels: k, AccountingErrorMax: &e,
				VMs: []VMResult{{Name: "a", Kind: "throttle", Kernels: k}}}, nil
		},
		native: func(context.Context) (*cuda.NativeResult, error) {
			*order = append(*order, "N")
			k := nk[ni]
			ni++
			return &cuda.NativeResult{DurationNs: 1e9, Kernels: k, VMs: []cuda.NativeVMResult{{Name: "a", Kernels: k}}}, nil
		},
	}
}

func TestInterleaveAlternatesAndTakesMedians(t *testing.T) {
	var order []string
	// Ratios per round: 0.8, 0.9, 0.5.
	res, err := interleave(context.Background(), 3, fakeSides([]int64{40_000, 45_000, 30_000}, []int64{50_000, 50_000, 60_000}, &order))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "SNNSSN" {
		t.Errorf("order %s, want SNNSSN", got)
	}
	in := res.Interleaved
	if in == nil || in.Rounds != 3 || len(in.Segments) != 3 {
		t.Fatalf("interleaved %+v", in)
	}
	// The reported round is the median ratio's, round 0 (0.8), and the
	// Result's own figures are that round's.
	if in.Reported != 0 || res.Kernels != 40_000 || res.Native.Kernels != 50_000 || *res.AccountingErrorMax != 0.01 {
		t.Errorf("reported round %d: kernels %d, native %d", in.Reported, res.Kernels, res.Native.Kernels)
	}
	if !in.Segments[1].NativeFirst || in.Segments[0].NativeFirst || in.Segments[2].NativeFirst {
		t.Errorf("native_first: %+v", in.Segments)
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6 {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	near("kernels/s median", in.KernelsPerSec.Median, 40_000)
	near("kernels/s min", in.KernelsPerSec.Min, 30_000)
	near("kernels/s max", in.KernelsPerSec.Max, 45_000)
	near("native median", in.NativeKernelsPerSec.Median, 50_000)
	near("native max", in.NativeKernelsPerSec.Max, 60_000)
	near("vs native median", in.VsNative.Median, 0.8)
	near("vs native min", in.VsNative.Min, 0.5)
	near("vs native max", in.VsNative.Max, 0.9)
	// Added per kernel, round by round: 25-20, 22.2-20, 33.3-16.7 us.
	near("added median", in.AddedNsPerKernel.Median, 5000)
	near("added min", in.AddedNsPerKernel.Min, 1e9/45_000-1e9/50_000)
	near("added max", in.AddedNsPerKernel.Max, 1e9/30_000-1e9/60_000)
	near("segment 2 added", in.Segments[2].AddedNsPerKernel, 1e9/30_000-1e9/60_000)
	if res.Native.VsNative == nil || math.Abs(*res.Native.VsNative-0.8) > 1e-9 {
		t.Errorf("the reported round's vs_native: %v", res.Native.VsNative)
	}
	out, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"interleaved":{"rounds":3,"reported":0`, `"added_ns_per_kernel":{"median":5000`, `"native":{`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("JSON lacks %s: %s", want, out)
		}
	}
	var b strings.Builder
	if err := WriteText(&b, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"3 rounds", "Sluice/native    median 0.800 (0.500-0.900)", "round 2 (native first)", "added per kernel median 5.00us"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

// TestInterleaveEvenRounds: with an even count the reported round is the
// lower middle ratio's, the medians the means of the middle two.
func TestInterleaveEvenRounds(t *testing.T) {
	var order []string
	res, err := interleave(context.Background(), 4, fakeSides([]int64{90, 70, 80, 60}, []int64{100, 100, 100, 100}, &order))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "SNNSSNNS" {
		t.Errorf("order %s", got)
	}
	in := res.Interleaved
	if in.Reported != 1 || res.Kernels != 70 {
		t.Errorf("reported %d (kernels %d), want round 1 (0.7)", in.Reported, res.Kernels)
	}
	if math.Abs(in.VsNative.Median-0.75) > 1e-9 {
		t.Errorf("median %v, want 0.75", in.VsNative.Median)
	}
}

// TestInterleaveOneRound: one round is the plain comparison, Sluice first,
// and the JSON has no interleaved field.
func TestInterleaveOneRound(t *testing.T) {
	for _, rounds := range []int{0, 1} {
		var order []string
		res, err := interleave(context.Background(), rounds, fakeSides([]int64{80}, []int64{100}, &order))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(order, "") != "SN" || res.Interleaved != nil || res.Native == nil || res.Native.Kernels != 100 {
			t.Errorf("rounds %d: order %v, interleaved %+v, native %+v", rounds, order, res.Interleaved, res.Native)
		}
		out, _ := json.Marshal(res)
		if strings.Contains(string(out), "interleaved") {
			t.Errorf("JSON of one round: %s", out)
		}
	}
}

// TestInterleaveStopsAtAFailure: a failing run ends the rounds with its
// error, naming the round and the side.
func TestInterleaveStopsAtAFailure(t *testing.T) {
	var order []string
	s := fakeSides([]int64{80, 80, 80}, []int64{100, 100, 100}, &order)
	boom := errors.New("no GPU")
	native := s.native
	calls := 0
	s.native = func(ctx context.Context) (*cuda.NativeResult, error) {
		if calls++; calls == 2 {
			return nil, boom
		}
		return native(ctx)
	}
	_, err := interleave(context.Background(), 3, s)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "round 2 of 3, native") {
		t.Errorf("error %v", err)
	}
	if got := strings.Join(order, ""); got != "SN" {
		t.Errorf("ran %s after the failure, want SN", got)
	}
}
