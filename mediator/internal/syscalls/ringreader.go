package syscalls

import (
	"sync/atomic"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// ringReader reads a request ring in order from its head: the poller's
// (sysring.go) and, once the forwarder is closed, Refuse's. Not safe for
// concurrent use.
type ringReader struct {
	area    *shm.Region
	off     uint64   // the ring's offset in area
	view    []uint64 // the ring's words
	slots   uint32
	head    uint64 // the next position to read
	idx     uint32 // head mod slots: its entry (no division per call)
	stallAt int64  // when the head was found waiting with a later entry ready; 0: not
	lookAt  int64  // the last look ahead
	words   [ringWords]uint64
	entry   abi.RingEntry
}

// newRingReader reads the ring of an area of slots slots from head on.
func newRingReader(area *shm.Region, slots int, head uint64) *ringReader {
	off := abi.SyscallRingOff(slots)
	return &ringReader{area: area, off: off, view: area.Words64(off, uint64(slots)*ringWords),
		slots: uint32(slots), head: head, idx: uint32(head % uint64(slots))}
}

// next copies the head entry out if it holds its call, decodes the copy
// (abi.DecodeRingWords) and moves the head past it; ok is false when the
// head entry is not (or no longer) the head's. The entry is valid until
// the next call.
func (r *ringReader) next() (e *abi.RingEntry, errno abi.Errno, ok bool) {
	ent := r.view[r.idx*ringWords : r.idx*ringWords+ringWords : r.idx*ringWords+ringWords]
	want := uint32(r.head + 1)
	if uint32(atomic.LoadUint64(&ent[0])) != want {
		return nil, 0, false
	}
	// A later entry's line is on its way while this one and the next are
	// served: a prefetch, which retires at once (a load used as one held
	// up the core until the line came, ~35 ns a call on the H100 host).
	ahead := r.idx + ringPrefetch
	if ahead >= r.slots { // no division: slots (a multiple of 64) > ringPrefetch
		ahead -= r.slots
	}
	r.area.Prefetch(r.off + uint64(ahead)*abi.SyscallRingEntrySize)
	// The copy: the entry's words, loaded once each.
	for i := range r.words {
		r.words[i] = atomic.LoadUint64(&ent[i])
	}
	errno = abi.DecodeRingWords(&r.words, r.slots, &r.entry)
	if r.entry.Tag != want {
		return nil, 0, false // rewritten under us: look again later
	}
	r.advance()
	return &r.entry, errno, true
}

// advance moves the head past its entry.
func (r *ringReader) advance() {
	r.head++
	if r.idx++; r.idx == r.slots {
		r.idx = 0
	}
	r.stallAt = 0
}

// skipHole is called, at time now (ns, any base), when the head entry is
// not ready. It skips the head, and reports how long it waited, once the
// head has waited abi.SyscallRingHoleNs with one of the ringLookAhead
// entries after it ready; it looks ahead at most every ringLookNs until it
// finds one.
func (r *ringReader) skipHole(now int64) (skipped bool, waited int64) {
	if r.stallAt == 0 {
		if now-r.lookAt < ringLookNs {
			return false, 0
		}
		r.lookAt = now
		if r.laterReady() {
			r.stallAt = now
		}
		return false, 0
	}
	if now-r.stallAt < abi.SyscallRingHoleNs {
		return false, 0
	}
	if !r.laterReady() {
		r.stallAt = 0
		return false, 0
	}
	waited = now - r.stallAt
	r.advance()
	return true, waited
}

// laterReady reports whether one of the ringLookAhead positions after the
// head holds its call.
func (r *ringReader) laterReady() bool {
	for k := uint64(1); k <= ringLookAhead && k < uint64(r.slots); k++ {
		i := (uint64(r.idx) + k) % uint64(r.slots)
		if uint32(atomic.LoadUint64(&r.view[i*ringWords])) == uint32(r.head+k+1) {
			return true
		}
	}
	return false
}
