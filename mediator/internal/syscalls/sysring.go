package syscalls

import (
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// The request ring (abi.FeatureSyscallRing, api/abi/sysring.go): callers
// that hold a slot publish their call in the next ring entry instead of in
// the slot, and the poller reads the entries in order, one line a call that
// the CPU's prefetcher streams, instead of a ready-map word and a slot line
// found anywhere in the area and taken by compare-and-swap. The slot stays
// the result mailbox: the call is served as if taken from it.
//
// The poller's head starts at position 0 when it starts serving the area.
// A head entry that is not written (a caller killed between its claim and
// its tag) while a later one is would stop the ring: the poller looks ahead
// at most every ringLookNs while the head waits, and skips the head once it
// has waited abi.SyscallRingHoleNs with a later entry ready.
const (
	ringLookNs    = int64(time.Millisecond)
	ringLookAhead = 64
	ringPrefetch  = 4 // entries ahead of the head touched while it is served
	ringWords     = abi.SyscallRingEntrySize / 8
)

// ringState is the poller's own.
type ringState struct {
	head      uint64 // the next position to consume
	published uint64 // head as last stored in Forwarder.ringPublished
	idx       uint32 // head mod slots: its entry
	stallAt   int64  // when the head was found waiting with a later entry ready (ns since t0); 0: not
	lookAt    int64  // the last look ahead (ns since t0)
}

// scanRing consumes the ready entries from the head until batch has max
// calls: answered here (fastcalls, refusals), or appended to batch for the
// proxy.
func (f *Forwarder) scanRing(batch []proxyproto.Request, max int, p *sock) []proxyproto.Request {
	r := &f.reqRing
	slots := uint32(f.spec.Slots)
	defer func() {
		if r.head != r.published { // one store a pass that moved the head
			f.ringPublished.Store(r.head)
			r.published = r.head
		}
	}()
	for len(batch) < max {
		ent := f.ringView[r.idx*ringWords : r.idx*ringWords+ringWords : r.idx*ringWords+ringWords] // no division per call
		want := uint32(r.head + 1)
		if uint32(atomic.LoadUint64(&ent[0])) != want {
			if f.ringHole() {
				continue
			}
			return batch
		}
		// The next entries' lines are on their way while this one is
		// served (a load nothing waits for).
		ahead := r.idx + ringPrefetch
		if ahead >= slots { // no division: slots (a multiple of 64) > ringPrefetch
			ahead -= slots
		}
		_ = atomic.LoadUint64(&f.ringView[ahead*ringWords])
		// The copy: the entry's words, loaded once each.
		w := &f.ringWords
		for i := range w {
			w[i] = atomic.LoadUint64(&ent[i])
		}
		e := &f.ringEntry
		errno := abi.DecodeRingWords(w, slots, e)
		if e.Tag != want {
			return batch // rewritten under us: the next pass looks again
		}
		f.advanceRing()
		f.tally.ring++
		if errno == abi.ErrnoFAULT {
			f.stats.ringBad.Add(1) // no slot of the area to answer in
			continue
		}
		s := &e.Call
		f.tally.count(s)
		if !s.Blocking() {
			// The caller holds the slot until now: free it.
			f.stats.nonBlocking.Add(1)
			if !f.spec.Area.CompareAndSwap32(abi.SlotOff(e.Slot)+abi.SysState,
				abi.SlotWord(abi.SlotProcessing, s.Seq), abi.SlotWord(abi.SlotFree, abi.NextSeq(s.Seq))) {
				f.stats.raced.Add(1)
			}
		}
		batch = f.dispatch(batch, e.Slot, s, errno)
	}
	return batch
}

// RingHead is the request ring's next position as the poller last
// published it (after each pass that moved it): where a claim counter made
// again must start (backend.VMSpec.RingHead), and where Refuse goes on once
// the forwarder is closed. Safe to call from any goroutine.
func (f *Forwarder) RingHead() uint64 { return f.ringPublished.Load() }

// advanceRing moves the head past its entry.
func (f *Forwarder) advanceRing() {
	r := &f.reqRing
	r.head++
	if r.idx++; r.idx == uint32(f.spec.Slots) {
		r.idx = 0
	}
	r.stallAt = 0
}

// ringHole is called when the head entry is not ready. It reports whether
// it skipped the head (abi.SyscallRingHoleNs waited with a later entry
// ready), so that the scan goes on.
func (f *Forwarder) ringHole() bool {
	r := &f.reqRing
	now := f.passAt
	if r.stallAt == 0 {
		if now-r.lookAt < ringLookNs {
			return false
		}
		r.lookAt = now
		if f.ringLaterReady() {
			r.stallAt = now
		}
		return false
	}
	if now-r.stallAt < abi.SyscallRingHoleNs {
		return false
	}
	if !f.ringLaterReady() {
		r.stallAt = 0
		return false
	}
	f.log.Warn("syscall ring: skipping a claimed entry never written", "position", r.head, "waited", time.Duration(now-r.stallAt))
	f.stats.ringSkipped.Add(1)
	f.advanceRing()
	return true
}

// ringLaterReady reports whether one of the ringLookAhead positions after
// the head holds its call.
func (f *Forwarder) ringLaterReady() bool {
	r := &f.reqRing
	n := f.spec.Slots
	for k := uint64(1); k <= ringLookAhead && k < uint64(n); k++ {
		if f.spec.Area.Load32(abi.RingEntryOff(n, r.head+k)+abi.RingTag) == uint32(r.head+k+1) {
			return true
		}
	}
	return false
}
