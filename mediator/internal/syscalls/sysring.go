package syscalls

import (
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
	ringPrefetch  = 8 // entries ahead of the head prefetched while it is served
	ringWords     = abi.SyscallRingEntrySize / 8
)

// scanRing consumes the ready entries from the head until batch has max
// calls: answered here (fastcalls, refusals), or appended to batch for the
// proxy.
func (f *Forwarder) scanRing(batch []proxyproto.Request, max int, p *sock) []proxyproto.Request {
	r := f.reqRing
	defer func() {
		if r.head != f.ringStored { // one store a pass that moved the head
			f.ringPublished.Store(r.head)
			f.ringStored = r.head
		}
	}()
	for len(batch) < max {
		e, errno, ok := r.next()
		if !ok {
			if skipped, waited := r.skipHole(f.passAt); skipped {
				f.log.Warn("syscall ring: skipping a claimed entry never written", "position", r.head-1, "waited", time.Duration(waited))
				f.stats.ringSkipped.Add(1)
				f.storeHead(r.head)
				continue
			}
			return batch
		}
		f.storeHead(r.head) // taken: a successor after a crash never reads it again
		f.tally.ring++
		if errno == abi.ErrnoFAULT {
			f.stats.ringBad.Add(1) // no slot of the area to answer in
			continue
		}
		s := &e.Call
		if f.answered.stale(e.Slot, s.Seq) {
			// Answered with EIO (or freed) after the crash while its
			// caller was still writing this entry: it must not run too.
			f.log.Warn("syscall ring: a call answered after the crash came late; not served", "slot", e.Slot, "position", r.head-1)
			f.stats.ringBad.Add(1)
			continue
		}
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

// storeHead stores the ring's head in Spec.HeadStore, if any.
func (f *Forwarder) storeHead(head uint64) {
	if p := f.spec.HeadStore; p != nil {
		*p = head
	}
}

// RingHead is the request ring's next position as the poller last
// published it (after each pass that moved it): where a claim counter made
// again must start (backend.VMSpec.RingHead), and where Refuse goes on once
// the forwarder is closed. Safe to call from any goroutine.
func (f *Forwarder) RingHead() uint64 { return f.ringPublished.Load() }
