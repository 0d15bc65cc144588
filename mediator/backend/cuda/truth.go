package cuda

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// maxTruthKernels bounds the THROTTLE records a VM keeps for its ground
// truth (24 bytes each): past it, a kernel adds its own time, not its part
// of the union (GroundTruth says how many did).
const maxTruthKernels = 1 << 22

// truthLog is a VM's completed THROTTLE kernels as they measured themselves
// on %globaltimer: when each first and last read the timer, and how long
// of that it ran (the steps longer than the gap, when its context was
// switched out, left out).
type truthLog struct {
	keep  atomic.Bool // Backend.KeepGroundTruth, or a switch-cost probe: else add keeps nothing
	mu    sync.Mutex
	ivals []truthIval
	extra int64 // kernels past maxTruthKernels: their own time, summed
	nx    int64 // how many
}

type truthIval struct{ first, last, ran int64 }

func (t *truthLog) add(first, last, ran int64) {
	if !t.keep.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.ivals) < maxTruthKernels && last >= first {
		t.ivals = append(t.ivals, truthIval{first, last, ran})
		return
	}
	t.extra += ran
	t.nx++
}

// total is the VM's GPU time by its kernels' own clock: the union of their
// intervals, so that kernels of one VM that ran at once on several streams
// count once, less the time its context was switched out. A kernel knows
// how long it was switched out in its interval (its steps longer than the
// gap), not when: its context is switched out as a whole, so kernels that
// overlap share those stretches. Each stretch of time between two kernel
// boundaries counts its length less the switched-out time its kernels
// saw, each kernel's spread evenly over its interval and averaged over the
// kernels that cover the stretch. That is exact for kernels that do not
// overlap (one stream), for kernels never switched out, and for kernels
// with the same interval; where kernels of several streams overlap and
// were switched out it estimates where the switched-out time lay (before,
// such a run of kernels counted the longest switched-out time of any one
// of them, and a VM on four streams under time slicing was credited most
// of its slices' gaps: VMs' truths added up to more than the wall time).
// kernels is how many records it holds; past maxTruthKernels they add
// their own time.
func (t *truthLog) total() (ns, kernels int64) {
	t.mu.Lock()
	ns, kernels = t.extra, t.nx+int64(len(t.ivals))
	ev := make([]truthEdge, 0, 2*len(t.ivals))
	for _, v := range t.ivals {
		if v.last <= v.first {
			continue
		}
		out := float32(v.last-v.first-v.ran) / float32(v.last-v.first)
		out = min(max(out, 0), 1)
		ev = append(ev, truthEdge{v.first, 1, out}, truthEdge{v.last, -1, -out})
	}
	t.mu.Unlock()
	slices.SortFunc(ev, func(a, b truthEdge) int { return cmp.Compare(a.at, b.at) })
	var (
		open int     // kernels whose interval covers the stretch
		out  float64 // the sum of their switched-out fractions
		sum  float64
	)
	for i, e := range ev {
		if i > 0 && open > 0 {
			sum += float64(e.at-ev[i-1].at) * (1 - out/float64(open))
		}
		open += int(e.open)
		out += float64(e.out)
		if open == 0 {
			out = 0 // no rounding carried from one run of kernels to the next
		}
	}
	return ns + int64(math.Round(sum)), kernels
}

// truthEdge is a kernel's interval starting (open 1) or ending (-1), with
// its switched-out fraction (16 bytes: two for each of up to
// maxTruthKernels records).
type truthEdge struct {
	at   int64
	open int32
	out  float32
}
