package channel

import (
	"math/bits"
	"time"
)

// Latencies a channel measures for each record (hostapi.Histogram):
// dispatch, from the doorbell that announced it (or from when the channel
// looked, without one) to its forwarding to the backend, which is where a
// scheduler's hold shows; turnaround, from that doorbell to its completion.
//
// Buckets are powers of two from 1 µs (HistBuckets of them, the last one
// open-ended): one clock read per forwarded batch and one per completion,
// an add to a counter under the channel's lock each.
const HistBuckets = 24

// HistBoundNs is the upper bound of bucket b (the last: none).
func HistBoundNs(b int) int64 { return int64(time.Microsecond) << b }

// Hist counts latencies in the buckets above.
type Hist struct {
	Counts [HistBuckets]uint64
	SumNs  uint64
}

// observe counts one latency of ns.
func (h *Hist) observe(ns int64) {
	ns = max(ns, 0)
	b := 0
	if us := uint64(ns-1) / uint64(time.Microsecond); ns > int64(time.Microsecond) {
		b = min(bits.Len64(us), HistBuckets-1) // ns in (2^(b-1), 2^b] µs
	}
	h.Counts[b]++
	h.SumNs += uint64(ns)
}

// Count is how many latencies were counted.
func (h *Hist) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Add adds o's counts to h.
func (h *Hist) Add(o Hist) {
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.SumNs += o.SumNs
}

// clock is the channels' time base: monotonic ns since the package loaded.
var clockStart = time.Now()

func now() int64 { return int64(time.Since(clockStart)) + 1 } // never 0: 0 means unset
