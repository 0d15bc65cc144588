package accounting

import (
	"slices"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// piece is a stretch of one engine's time attributed to a VM, before the
// split between engines busy at once.
type piece struct {
	vm   uint32
	a, b int64
}

// loga is the total-busy-time estimator (see the package doc).
type loga struct {
	start    int64
	began    bool
	havePrev bool
	tPrev    int64
	prev     []backend.Running    // what ran at tPrev, one entry per engine
	cur      []backend.Running    // scratch: what runs at the sample being taken
	pieces   []piece              // scratch
	pts      []int64              // scratch
	refs     []backend.ChannelRef // scratch
	lastRefs []backend.ChannelRef // the channels listed by the previous sample
	busy     map[uint32]int64
	active   map[uint32]bool
	channels map[backend.ChannelRef]struct{}
	samples  int
}

func newLoga() *loga {
	l := &loga{}
	l.reset(0)
	l.began = false
	return l
}

func (l *loga) reset(t int64) {
	l.start, l.began, l.havePrev, l.tPrev = t, true, false, t
	l.prev, l.samples, l.lastRefs = l.prev[:0], 0, l.lastRefs[:0]
	l.busy = map[uint32]int64{}
	l.active = map[uint32]bool{}
	l.channels = map[backend.ChannelRef]struct{}{}
}

func (l *loga) Begin(t int64) { l.reset(t) }

func (l *loga) Observe(st *backend.Status) { l.observe(st) }

// observe takes a sample and reports whether it was accepted.
func (l *loga) observe(st *backend.Status) bool {
	t1 := st.Time
	if !l.began || t1 < l.start || (l.havePrev && t1 <= l.tPrev) {
		return false
	}
	l.cur = perEngine(l.cur[:0], st.Running)
	l.markActive(st)
	var prev []backend.Running
	if l.havePrev {
		prev = l.prev
	}
	l.interval(l.tPrev, t1, prev, l.cur)
	l.prev, l.cur = l.cur, l.prev
	l.tPrev, l.havePrev = t1, true
	l.samples++
	return true
}

// markActive records the sample's running and active channels. Consecutive
// samples mostly list the same ones: the maps are only touched on a change.
func (l *loga) markActive(st *backend.Status) {
	refs := l.refs[:0]
	for _, r := range st.Running {
		refs = append(refs, r.ChannelRef)
	}
	refs = append(refs, st.Active...)
	if !slices.Equal(refs, l.lastRefs) {
		for _, c := range refs {
			l.active[c.VM] = true
			l.channels[c] = struct{}{}
		}
		refs, l.lastRefs = l.lastRefs, refs
	}
	l.refs = refs
}

func (l *loga) End(t int64) Phase {
	t = max(t, l.tPrev, l.start)
	if l.havePrev && t > l.tPrev {
		l.interval(l.tPrev, t, l.prev, nil)
	}
	ph := Phase{Start: l.start, End: t, Busy: l.busy, Active: l.active, Channels: len(l.channels), Samples: l.samples}
	l.reset(t)
	l.began = false
	return ph
}

// perEngine copies running into dst keeping the first entry of each engine.
func perEngine(dst, running []backend.Running) []backend.Running {
	for _, r := range running {
		if _, dup := findEngine(dst, r.Engine); !dup {
			dst = append(dst, r)
		}
	}
	return dst
}

func findEngine(rs []backend.Running, engine int) (backend.Running, bool) {
	for _, r := range rs {
		if r.Engine == engine {
			return r, true
		}
	}
	return backend.Running{}, false
}

// interval charges (t0, t1] given what ran at t0 (prev) and at t1 (cur).
func (l *loga) interval(t0, t1 int64, prev, cur []backend.Running) {
	ps := l.pieces[:0]
	for _, c := range cur {
		since := min(max(c.Since, t0), t1)
		p, ok := findEngine(prev, c.Engine)
		switch {
		case !ok:
			ps = appendPiece(ps, c.VM, since, t1)
		case p.ChannelRef == c.ChannelRef && p.Since == c.Since:
			ps = appendPiece(ps, c.VM, since, t1) // the same command, still running
		default:
			// p ended in (t0, t1] and c started at since: back to back.
			ps = appendPiece(ps, p.VM, t0, since)
			ps = appendPiece(ps, c.VM, since, t1)
		}
	}
	for _, p := range prev {
		if _, ok := findEngine(cur, p.Engine); !ok {
			// p ended somewhere in (t0, t1]: the midpoint is unbiased.
			ps = appendPiece(ps, p.VM, t0, t0+(t1-t0)/2)
		}
	}
	l.pieces = ps
	l.charge(ps)
}

func appendPiece(ps []piece, vm uint32, a, b int64) []piece {
	if b > a {
		ps = append(ps, piece{vm: vm, a: a, b: b})
	}
	return ps
}

// charge adds the pieces to busy, splitting every stretch covered by k
// pieces k ways so that the total never exceeds the wall time.
func (l *loga) charge(ps []piece) {
	switch len(ps) {
	case 0:
		return
	case 1:
		l.busy[ps[0].vm] += ps[0].b - ps[0].a
		return
	}
	pts := l.pts[:0]
	for _, p := range ps {
		pts = append(pts, p.a, p.b)
	}
	slices.Sort(pts)
	pts = slices.Compact(pts)
	l.pts = pts
	for i := 0; i+1 < len(pts); i++ {
		x, y := pts[i], pts[i+1]
		k := int64(0)
		for _, p := range ps {
			if p.a <= x && y <= p.b {
				k++
			}
		}
		if k == 0 {
			continue
		}
		share, rem := (y-x)/k, (y-x)%k
		for _, p := range ps {
			if p.a <= x && y <= p.b {
				extra := int64(0)
				if rem > 0 {
					extra, rem = 1, rem-1
				}
				l.busy[p.vm] += share + extra
			}
		}
	}
}
