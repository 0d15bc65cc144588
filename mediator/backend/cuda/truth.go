package cuda

import (
	"cmp"
	"slices"
	"sync"
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
	mu    sync.Mutex
	ivals []truthIval
	extra int64 // kernels past maxTruthKernels: their own time, summed
	nx    int64 // how many
}

type truthIval struct{ first, last, ran int64 }

func (t *truthLog) add(first, last, ran int64) {
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
// count once, less the time its context was switched out. Kernels whose
// intervals overlap form a segment; the segment counts its length less the
// longest switched-out time of any of its kernels (a context is switched
// out as a whole, so overlapping kernels share those stretches: exact for a
// segment of one kernel, and a lower bound of the switched-out time when
// kernels that overlap were switched out at different times). kernels is
// how many records it holds; past maxTruthKernels they add their own time.
func (t *truthLog) total() (ns, kernels int64) {
	t.mu.Lock()
	iv := slices.Clone(t.ivals)
	ns, kernels = t.extra, t.nx+int64(len(t.ivals))
	t.mu.Unlock()
	slices.SortFunc(iv, func(a, b truthIval) int { return cmp.Compare(a.first, b.first) })
	var start, end, out int64
	for i, v := range iv {
		if i == 0 || v.first >= end {
			if i > 0 {
				ns += end - start - out
			}
			start, end, out = v.first, v.last, 0
		}
		end = max(end, v.last)
		out = max(out, v.last-v.first-v.ran)
	}
	if len(iv) > 0 {
		ns += end - start - out
	}
	return ns, kernels
}
