package ivshmem

import "time"

// Storm limiting: a guest that rings the host peer faster than
// ServerConfig.DoorbellLimit has the vector it rings muted (left out of
// epoll, its eventfd undrained) for MuteFor; the server then takes its
// signals, coalesced in the eventfd's counter, in one read when the mute
// ends. The guest loses nothing (a doorbell says only "look at the ring",
// and the ring is read when the mute ends), and the storm costs the host a
// bounded rate of reads instead of one per signal.

// MuteFor is how long a storming vector stays muted.
const MuteFor = time.Millisecond

// limiter is a token bucket of doorbell signals, refilled at rate per
// second up to burst. It counts signals, not reads: the read that ends a
// mute brings the signals coalesced during it, so a storm that goes on is
// muted again at once, one read a mute, and stops costing reads. The
// caller serializes calls (the epoll goroutine); now is monotonic
// nanoseconds.
type limiter struct {
	perNs  float64 // tokens per ns; 0: no limit
	burst  float64
	tokens float64
	last   int64
}

// newLimiter allows rate doorbells a second on average and a burst of a
// mute's worth (at least 64), so a vector is muted only by a storm that
// lasts; rate 0 allows everything.
func newLimiter(rate int) limiter {
	if rate <= 0 {
		return limiter{}
	}
	burst := max(64, float64(rate)*MuteFor.Seconds())
	return limiter{perNs: float64(rate) / 1e9, burst: burst, tokens: burst}
}

// allow takes n tokens at now (n signals read at once); false means they
// are over the limit. What is over is owed, up to a burst, so a storm stays
// muted at its rate's share.
func (l *limiter) allow(now int64, n uint64) bool {
	if l.perNs == 0 {
		return true
	}
	if l.last != 0 && now > l.last {
		l.tokens = min(l.burst, l.tokens+float64(now-l.last)*l.perNs)
	}
	l.last = now
	l.tokens -= float64(n)
	if l.tokens < 0 {
		l.tokens = max(l.tokens, -l.burst)
		return false
	}
	return true
}
