package workload

import (
	"slices"
	"time"

	"github.com/sluice-gpu/sluice/guest-agent/sdk"
)

// LatencyCause is the round trips of one class (LatencyConfig.Causes):
// how many, how many of them were slow (over twice the p50 of all), and
// their distribution.
type LatencyCause struct {
	Class     string  `json:"class"`
	Count     int     `json:"count"`
	Slow      int     `json:"slow"`
	RoundTrip Summary `json:"round_trip_ns"`
}

// The classes of a round trip, each the first that applies, in this order.
const (
	// causeSlept: the wait slept on its eventfd until the host signalled.
	causeSlept = iota
	// causeRang: the submission rang the doorbell (the host was not
	// spinning on the ring: it had to be woken, or read it on its poll).
	causeRang
	// causeAway: two looks of the wait were AwayGap or more apart (the
	// waiter was off its CPU: preempted, or in the Go scheduler).
	causeAway
	// causeYielded: the wait yielded to the Go scheduler, and came back
	// within AwayGap.
	causeYielded
	// causeSpun: none of those: the waiter looked without a pause and
	// the doorbell was left out; the round trip is the host's time.
	causeSpun
	nCauses
)

var causeNames = [nCauses]string{"slept", "rang", "away", "yielded", "spun"}

// AwayGap is the gap between two looks of a wait that counts as the
// waiter being away (causeAway): a look takes tens of nanoseconds, a
// few hundred when the host has just written the line.
const AwayGap = time.Microsecond

// causeTracker classifies each round trip from the channel's counters and
// its wait trace.
type causeTracker struct {
	ch           *sdk.Channel
	tr           sdk.WaitTrace
	quiet, sleep uint64
	yields       uint64
	class        []uint8
}

func newCauseTracker(ch *sdk.Channel, n int) *causeTracker {
	t := &causeTracker{ch: ch, class: make([]uint8, 0, n)}
	ch.SetTrace(&t.tr)
	return t
}

// begin is called before a round trip.
func (t *causeTracker) begin() {
	t.quiet, t.sleep, t.yields = t.ch.Quiet(), t.ch.Sleeps(), t.tr.Yields
	t.tr.ResetGap()
}

// end classifies the round trip begin started.
func (t *causeTracker) end() {
	c := uint8(causeSpun)
	switch {
	case t.ch.Sleeps() != t.sleep:
		c = causeSlept
	case t.ch.Quiet() == t.quiet:
		c = causeRang
	case t.tr.MaxGap >= AwayGap:
		c = causeAway
	case t.tr.Yields != t.yields:
		c = causeYielded
	}
	t.class = append(t.class, c)
}

// summarize is the classes' distributions over samples (in the order the
// round trips ran, as end classified them); it leaves samples as they
// are. It ends the channel's trace.
func (t *causeTracker) summarize(samples []time.Duration) []LatencyCause {
	t.ch.SetTrace(nil)
	all := slices.Clone(samples)
	slow := 2 * time.Duration(Summarize(all).P50)
	var by [nCauses][]time.Duration
	out := make([]LatencyCause, nCauses)
	for i, s := range samples[:min(len(samples), len(t.class))] {
		c := t.class[i]
		by[c] = append(by[c], s)
		if s > slow {
			out[c].Slow++
		}
	}
	for c := range out {
		out[c].Class, out[c].Count, out[c].RoundTrip = causeNames[c], len(by[c]), Summarize(by[c])
	}
	return out
}
