// Package lathist is a latency histogram of fixed size: the benchmark
// harness keeps one per VM (doorbell to completion seen by the guest) and
// the cuda backend's native baseline one per VM (launch to completion seen
// by the host).
package lathist

import "math/bits"

// Hist is a histogram of latencies in nanoseconds, in buckets of 1/latSub
// of a power of two: a quantile read from it is at most 1/latSub (1.6%)
// above the true one, and its memory does not grow with the run. The zero
// Hist is empty and ready.
type Hist struct {
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

// Add counts one latency of ns.
func (l *Hist) Add(ns int64) {
	l.counts[latBucket(ns)]++
	l.n++
}

// N is how many latencies were added.
func (l *Hist) N() int64 { return l.n }

// Quantile is an upper bound of the q-quantile (0 with no samples).
func (l *Hist) Quantile(q float64) int64 {
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
