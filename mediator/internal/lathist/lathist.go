package bench

import "math/bits"

// latencies is a histogram of kernel latencies (doorbell to completion seen
// by the guest), in buckets of 1/latSub of a power of two: a quantile read
// from it is at most 1/latSub (1.6%) above the true one, and its memory
// does not grow with the run.
type latencies struct {
	n      int64
	counts [64 * latSub]int64
}

const latSubBits = 6
const latSub = 1 << latSubBits

// bucket is v's bucket; its upper bound is upper(bucket).
func latBucket(v int64) int {
	if v < latSub {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 1 - latSubBits // v >> e is in [latSub, 2·latSub)
	return (e+1)*latSub + int(uint64(v)>>e) - latSub
}

// latUpper is the largest value of bucket b.
func latUpper(b int) int64 {
	if b < latSub {
		return int64(b)
	}
	e := b/latSub - 1
	m := int64(b%latSub + latSub)
	return (m+1)<<e - 1
}

func (l *latencies) add(ns int64) {
	l.counts[latBucket(ns)]++
	l.n++
}

// quantile is an upper bound of the q-quantile (0 with no samples).
func (l *latencies) quantile(q float64) int64 {
	if l.n == 0 {
		return 0
	}
	rank := int64(q*float64(l.n) + 0.999999)
	rank = min(max(rank, 1), l.n)
	var seen int64
	for b, c := range l.counts {
		if seen += c; seen >= rank {
			return latUpper(b)
		}
	}
	return latUpper(len(l.counts) - 1)
}
