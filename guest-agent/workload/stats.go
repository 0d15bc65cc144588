package workload

import (
	"slices"
	"time"
)

// Summary describes a set of durations in nanoseconds.
type Summary struct {
	P50  int64 `json:"p50"`
	P90  int64 `json:"p90"`
	P99  int64 `json:"p99"`
	Max  int64 `json:"max"`
	Mean int64 `json:"mean"`
}

// Summarize sorts samples in place and summarizes them with nearest-rank
// percentiles. No samples give a zero Summary.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return Summary{
		P50:  int64(rank(samples, 50)),
		P90:  int64(rank(samples, 90)),
		P99:  int64(rank(samples, 99)),
		Max:  int64(samples[len(samples)-1]),
		Mean: int64(sum / time.Duration(len(samples))),
	}
}

// rank is the nearest-rank percentile p of sorted samples.
func rank(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100 // ceil(n*p/100), 1-based
	return sorted[max(i, 1)-1]
}
