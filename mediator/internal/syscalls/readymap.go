package syscalls

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// The ready map (abi.FeatureReadyMap): one hint byte per slot that a guest
// sets after it stored READY. The poller reads the map 8 bytes at a time (16
// cache lines for 1024 slots, against 1024 for the state words), clears the
// set bytes of a word with one atomic AND per half, then reads the hinted
// slots' state words: a guest that publishes a slot again after the clear
// sets its byte again, so no publish is lost. A slot that is still
// POPULATING (its hint landed before its READY) gets its byte back for the
// next pass; any other state drops the hint. Hints are only hints: the state
// word decides, and a sweep of every state word starts every sweepNs,
// sweepChunk slots per pass (whole at a wakeup from idle), for guests that set
// no hints, stale or hostile ones.
const (
	sweepNs    = int64(200 * time.Microsecond)
	sweepChunk = 32
)

// scanHints is one pass over the ready map, from the word *next falls in.
// It first collects the hinted slots (clearing their hints), then reads
// their state words in one loop, whose cache misses overlap, then serves
// the READY ones.
func (f *Forwarder) scanHints(batch []proxyproto.Request, max int, next *uint32, p *sock) []proxyproto.Request {
	n := uint32(f.spec.Slots)
	words := (n + 7) / 8
	w0 := (*next / 8) % words
	*next = (*next + 8) % n
	cand := f.cand[:0]
	// The map's words from w0 round to w0 again: four words a look while
	// they are all zero (an idle pass is mostly this loop), no division
	// per word (a 32-bit DIV is ~25 cycles), no bounds check of the region
	// per word (f.hints is the map's words, checked once).
	h := f.hints
	for k, w := uint32(0), w0; k < words && len(batch)+len(cand) < max; k, w = k+1, w+1 {
		if w == words {
			w = 0
		}
		if k+4 <= words && w+4 <= words && atomic.LoadUint64(&h[w])|atomic.LoadUint64(&h[w+1])|
			atomic.LoadUint64(&h[w+2])|atomic.LoadUint64(&h[w+3]) == 0 {
			k, w = k+3, w+3
			continue
		}
		v := atomic.LoadUint64(&h[w])
		if v == 0 {
			continue
		}
		off := abi.SyscallReadyMapOff + uint64(w)*8
		f.clearHints(off, v)
		for v != 0 {
			b := uint32(bits.TrailingZeros64(v)) / 8
			v &^= 0xff << (8 * b)
			if i := w*8 + b; i < n { // past the slots: a hostile guest's, dropped
				cand = append(cand, i)
			}
		}
	}
	states := f.states[:len(cand)]
	for j, i := range cand {
		states[j] = f.spec.Area.Load32(abi.SlotOff(i) + abi.SysState)
	}
	served := 0
	for j, i := range cand {
		st, _ := abi.SplitSlotWord(states[j])
		switch {
		case st == abi.SlotPopulating || (st == abi.SlotReady && len(batch) >= max):
			f.setHint(i) // READY may land after the hint; or no room this pass
		case st == abi.SlotReady:
			f.tally.hinted++
			batch = f.serveSlot(batch, i, p)
			if served++; served%256 == 0 {
				f.drain()
			}
		}
	}
	f.cand = cand
	return batch
}

// clearHints clears the set bytes of the map word at off (v as read) with
// an atomic AND on each half that has any: the guest may store the word's
// other bytes meanwhile.
func (f *Forwarder) clearHints(off, v uint64) {
	var mask uint64
	for b := 0; b < 64; b += 8 {
		if v>>b&0xff != 0 {
			mask |= 0xff << b
		}
	}
	if lo := uint32(mask); lo != 0 {
		f.spec.Area.And32(off, ^lo)
	}
	if hi := uint32(mask >> 32); hi != 0 {
		f.spec.Area.And32(off+4, ^hi)
	}
}

// setHint sets slot i's hint byte again, by compare-and-swap on its aligned
// 32-bit word.
func (f *Forwarder) setHint(i uint32) {
	off := abi.SyscallReadyMapOff + uint64(i)
	word, shift := off&^3, 8*(off&3)
	for {
		old := f.spec.Area.Load32(word)
		if old>>shift&0xff != 0 || f.spec.Area.CompareAndSwap32(word, old, old|1<<shift) {
			return
		}
	}
}
