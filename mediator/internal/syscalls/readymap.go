package syscalls

import (
	"math/bits"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// The ready map (abi.FeatureReadyMap): one hint byte per slot that a guest
// sets after it stored READY. The poller reads the map 8 bytes at a time (16
// cache lines for 1024 slots, against 1024 for the state words), and for
// each set byte clears it, then reads the slot's state word: a guest that
// publishes the slot again after the clear sets the byte again, so no
// publish is lost. A slot that is still POPULATING (its hint landed before
// its READY) gets its byte back for the next pass; any other state drops
// the hint. Hints are only hints: the state word decides, and every
// fullScanPasses passes or fullScanNs the poller scans every state word
// (guests that set no hints, stale or hostile ones).
const (
	fullScanPasses = 64
	fullScanNs     = int64(50 * time.Microsecond)
)

// scanHints is one pass over the ready map, from the word *next falls in.
func (f *Forwarder) scanHints(batch []proxyproto.Request, max int, next *uint32, p *sock) []proxyproto.Request {
	n := uint32(f.spec.Slots)
	words := (n + 7) / 8
	w0 := (*next / 8) % words
	served := 0
	for k := uint32(0); k < words && len(batch) < max; k++ {
		w := (w0 + k) % words
		off := abi.SyscallReadyMapOff + uint64(w)*8
		v := f.spec.Area.Load64(off)
		for v != 0 && len(batch) < max {
			b := uint32(bits.TrailingZeros64(v)) / 8
			v &^= 0xff << (8 * b)
			i := w*8 + b
			f.setHint(off+uint64(b), false)
			if i >= n {
				continue // past the slots: a hostile guest's, dropped
			}
			st, _ := abi.SplitSlotWord(f.spec.Area.Load32(abi.SlotOff(i) + abi.SysState))
			switch st {
			case abi.SlotReady:
				f.stats.hinted.Add(1)
				batch = f.serveSlot(batch, i, p)
				if served++; served%256 == 0 {
					f.mu.Lock()
					f.drainLocked()
					f.mu.Unlock()
				}
			case abi.SlotPopulating:
				f.setHint(off+uint64(b), true) // READY may land after the hint
			}
		}
	}
	*next = (*next + 8) % n
	return batch
}

// setHint sets or clears the hint byte at off (relative to the area) with a
// compare-and-swap on its aligned 32-bit word: the guest may store the
// other bytes of the word meanwhile.
func (f *Forwarder) setHint(off uint64, set bool) {
	word, shift := off&^3, 8*(off&3)
	mask := uint32(0xff) << shift
	for {
		old := f.spec.Area.Load32(word)
		nw := old &^ mask
		if set {
			nw |= 1 << shift
		}
		if old == nw || f.spec.Area.CompareAndSwap32(word, old, nw) {
			return
		}
	}
}
