package accounting

import (
	"maps"
	"math"
	"slices"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// openSeg is the segment an engine is in: the channel it shows and the time
// that channel was first seen there.
type openSeg struct {
	engine int
	ref    backend.ChannelRef
	from   int64
}

// segAvg is the average-segment-length baseline (see the package doc). It
// measures the phase's busy time with an embedded loga estimator and only
// distributes it differently.
type segAvg struct {
	l     *loga
	open  []openSeg
	next  []openSeg // scratch
	sum   map[uint32]int64
	count map[uint32]int64
}

func newSegAvg() *segAvg {
	return &segAvg{l: newLoga(), sum: map[uint32]int64{}, count: map[uint32]int64{}}
}

func (s *segAvg) Begin(t int64) {
	s.l.Begin(t)
	s.open = s.open[:0]
	clear(s.sum)
	clear(s.count)
}

func (s *segAvg) Observe(st *backend.Status) {
	first := !s.l.havePrev
	if !s.l.observe(st) {
		return
	}
	t := st.Time
	if first {
		t = s.l.start // the released code timestamps the state read before polling
	}
	// s.l.prev now holds this sample's running set, one entry per engine.
	next := s.next[:0]
	for _, r := range s.l.prev {
		from := t
		if o, ok := findOpen(s.open, r.Engine); ok && o.ref == r.ChannelRef {
			from = o.from
		}
		next = append(next, openSeg{engine: r.Engine, ref: r.ChannelRef, from: from})
	}
	for _, o := range s.open {
		if n, ok := findOpen(next, o.engine); !ok || n.ref != o.ref {
			s.close(o, st.Time)
		}
	}
	s.open, s.next = next, s.open
}

func findOpen(os []openSeg, engine int) (openSeg, bool) {
	for _, o := range os {
		if o.engine == engine {
			return o, true
		}
	}
	return openSeg{}, false
}

func (s *segAvg) close(o openSeg, t int64) {
	s.sum[o.ref.VM] += max(t-o.from, 0)
	s.count[o.ref.VM]++
}

func (s *segAvg) End(t int64) Phase {
	for _, o := range s.open {
		s.close(o, max(t, s.l.tPrev))
	}
	s.open = s.open[:0]
	ph := s.l.End(t)
	total := ph.Total()
	vms := slices.Sorted(maps.Keys(s.count)) // a fixed order: float sums are not associative
	var sumAvg float64
	for _, vm := range vms {
		sumAvg += float64(s.sum[vm]) / float64(s.count[vm])
	}
	busy := make(map[uint32]int64, len(vms))
	if sumAvg > 0 {
		for _, vm := range vms {
			avg := float64(s.sum[vm]) / float64(s.count[vm])
			if b := int64(math.Floor(float64(total) * avg / sumAvg)); b > 0 {
				busy[vm] = b
			}
		}
	}
	ph.Busy = busy
	return ph
}
