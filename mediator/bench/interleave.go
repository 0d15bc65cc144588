package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend/cuda"
)

// Interleaved is the comparison with the native baseline over several
// rounds of one spec run: each round is a whole Sluice run and a whole
// native run, one right after the other, the order alternating from round
// to round (Sluice first in round 0, native first in round 1, ...), so
// that both sides see the same drift of the GPU and the host. The native
// loop's own rate varies by up to a tenth between runs on one machine,
// which moves a depth-1 kernel's added latency by about a microsecond;
// the medians over the rounds, and their spread, say how much of a
// difference between two builds is the build's.
//
// The Result's other fields (and Native) are the figures of one round,
// Reported: the round whose Sluice/native ratio is the median (the lower
// of the two middle ones for an even count).
type Interleaved struct {
	Rounds   int `json:"rounds"`
	Reported int `json:"reported"` // the round the Result's other fields come from
	// Per-round figures, in the order run.
	Segments []Segment `json:"segments"`
	// Spreads over the rounds. VsNative and AddedNsPerKernel are taken
	// round by round (Sluice's run against the native run beside it)
	// before the median.
	KernelsPerSec       Spread `json:"kernels_per_sec"`
	NativeKernelsPerSec Spread `json:"native_kernels_per_sec"`
	VsNative            Spread `json:"vs_native"`
	// AddedNsPerKernel is 1e9/kernels_per_sec − 1e9/native_kernels_per_sec:
	// with one kernel in flight, what Sluice adds to each kernel's period.
	AddedNsPerKernel Spread `json:"added_ns_per_kernel"`
}

// Segment is one round of an interleaved run.
type Segment struct {
	NativeFirst         bool    `json:"native_first"`
	KernelsPerSec       float64 `json:"kernels_per_sec"`
	NativeKernelsPerSec float64 `json:"native_kernels_per_sec"`
	VsNative            float64 `json:"vs_native"`
	AddedNsPerKernel    float64 `json:"added_ns_per_kernel"`
	// AccountingErrorMax is the round's (null when accounting is off).
	AccountingErrorMax *float64 `json:"accounting_error_max"`
}

// Spread is the median, least and greatest of a figure over the rounds.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// sides are the two runs of a round: Sluice's, and the native baseline's.
type sides struct {
	sluice func(context.Context) (*Result, error)
	native func(context.Context) (*cuda.NativeResult, error)
}

// interleave runs rounds rounds of both sides, alternating which goes
// first, and returns the median round's Result with Native attached and
// Interleaved filled (left nil for a single round: the Result is then
// what a run without rounds gives).
func interleave(ctx context.Context, rounds int, s sides) (*Result, error) {
	rounds = max(rounds, 1)
	type round struct {
		res   *Result
		nr    *cuda.NativeResult
		nwall int64 // how long the native run took
	}
	rs := make([]round, rounds)
	for i := range rs {
		nativeFirst := i%2 == 1
		for j := 0; j < 2; j++ {
			if (j == 0) == nativeFirst {
				t0 := time.Now()
				nr, err := s.native(ctx)
				if err != nil {
					return nil, fmt.Errorf("round %d of %d, native: %w", i+1, rounds, err)
				}
				rs[i].nr, rs[i].nwall = nr, int64(time.Since(t0))
			} else {
				res, err := s.sluice(ctx)
				if err != nil {
					return nil, fmt.Errorf("round %d of %d, Sluice: %w", i+1, rounds, err)
				}
				rs[i].res = res
			}
		}
		if err := attachNative(rs[i].res, rs[i].nr); err != nil {
			return nil, err
		}
		rs[i].res.Native.WallNs = rs[i].nwall
	}
	if rounds == 1 {
		return rs[0].res, nil
	}
	in := &Interleaved{Rounds: rounds, Segments: make([]Segment, rounds)}
	var k, n, vs, added []float64
	for i, r := range rs {
		sk, nk := perSec(r.res.Kernels, r.res.DurationNs), r.res.Native.KernelsPerSec
		seg := Segment{NativeFirst: i%2 == 1, KernelsPerSec: sk, NativeKernelsPerSec: nk,
			AccountingErrorMax: r.res.AccountingErrorMax}
		if sk > 0 && nk > 0 {
			seg.VsNative, seg.AddedNsPerKernel = sk/nk, 1e9/sk-1e9/nk
			vs, added = append(vs, seg.VsNative), append(added, seg.AddedNsPerKernel)
		}
		k, n = append(k, sk), append(n, nk)
		in.Segments[i] = seg
	}
	in.KernelsPerSec, in.NativeKernelsPerSec = spreadOf(k), spreadOf(n)
	in.VsNative, in.AddedNsPerKernel = spreadOf(vs), spreadOf(added)
	in.Reported = medianRound(in.Segments)
	res := rs[in.Reported].res
	res.Interleaved = in
	return res, nil
}

// medianRound is the round whose Sluice/native ratio is the median (the
// lower middle one for an even count; rounds without a ratio sort first).
func medianRound(segs []Segment) int {
	idx := make([]int, len(segs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		x, y := segs[a].VsNative, segs[b].VsNative
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	return idx[(len(idx)-1)/2]
}

// writeInterleaved writes the rounds and their spread.
func writeInterleaved(w io.Writer, r *Result) error {
	in := r.Interleaved
	if in == nil {
		return nil
	}
	_, err := fmt.Fprintf(w, "\n%d rounds, Sluice and native interleaved (figures above: round %d, the median ratio)\n"+
		"  kernels/s        median %.0f (%.0f-%.0f), native %.0f (%.0f-%.0f)\n"+
		"  Sluice/native    median %.3f (%.3f-%.3f)\n"+
		"  added per kernel median %.2fus (%.2f-%.2fus; 1e6/kernels/s against native's, what a depth-1 kernel pays)\n",
		in.Rounds, in.Reported+1,
		in.KernelsPerSec.Median, in.KernelsPerSec.Min, in.KernelsPerSec.Max,
		in.NativeKernelsPerSec.Median, in.NativeKernelsPerSec.Min, in.NativeKernelsPerSec.Max,
		in.VsNative.Median, in.VsNative.Min, in.VsNative.Max,
		in.AddedNsPerKernel.Median/1e3, in.AddedNsPerKernel.Min/1e3, in.AddedNsPerKernel.Max/1e3)
	if err != nil {
		return err
	}
	for i, s := range in.Segments {
		first := "Sluice first"
		if s.NativeFirst {
			first = "native first"
		}
		if _, err := fmt.Fprintf(w, "  round %d (%s): kernels/s %.0f, native %.0f, Sluice/native %.3f, added %.2fus\n",
			i+1, first, s.KernelsPerSec, s.NativeKernelsPerSec, s.VsNative, s.AddedNsPerKernel/1e3); err != nil {
			return err
		}
	}
	return nil
}
