package cuda

import (
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
)

// TestRingEntryStamps: an entry is ready once its stamp names its position
// (putEntry stores it last, then the tail); the same slot a ring earlier or
// later, or a slot never written, is not.
func TestRingEntryStamps(t *testing.T) {
	l := newBlockLayout(2, 8, false)
	blk := newBlock(l, make([]byte, l.size))
	rc := l.ringCap
	for _, i := range []uint64{0, 1, rc - 1, rc, 5*rc + 3} {
		if blk.ready(i) {
			t.Fatalf("position %d ready before it was written", i)
		}
		rec := abi.EncodeCommand(abi.Command{Op: abi.OpThrottle, DurationNs: i + 7})
		blk.putEntry(i, 1, 40+i, &rec)
		if !blk.ready(i) || blk.load(offTail) != i+1 {
			t.Fatalf("position %d: ready %v, tail %d", i, blk.ready(i), blk.load(offTail))
		}
		if blk.ready(i+rc) || (i >= rc && blk.ready(i-rc)) {
			t.Fatalf("position %d's slot is ready for another lap", i)
		}
		e := blk.entry(i)
		var got abi.Record
		copy(got[:], e[entryRecord:])
		if le.Uint32(e[entryChannel:]) != 1 || le.Uint64(e[entrySeq:]) != 40+i || got != rec {
			t.Fatalf("position %d: entry %x", i, e)
		}
		if off := blk.entryOff(i); off%128 != 0 {
			t.Fatalf("position %d's entry at %d, not on a pair of cache lines", i, off)
		}
	}
}

// TestWorkerTakesOnlyStampedEntries: the worker issues nothing from a tail
// that moved over an entry without its stamp; the command stamped there
// later runs and completes.
func TestWorkerTakesOnlyStampedEntries(t *testing.T) {
	r := newRig(t, nil)
	vm := r.attach(1, 1, nil)
	vm.mu.Lock()
	at := vm.tail
	e := vm.blk.entry(at)
	rec := abi.EncodeCommand(abi.Command{Op: abi.OpNop})
	le.PutUint64(e[entrySeq:], 1)
	copy(e[entryRecord:], rec[:])
	vm.blk.store(offTail, at+1) // the tail says one, the stamp does not
	vm.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // the worker spins on the ring meanwhile
	if h := vm.blk.load(offHead); h != at {
		t.Fatalf("the worker took an unstamped entry: head %d, want %d", h, at)
	}
	r.submit(vm, 0, abi.Command{Op: abi.OpNop}, 9) // writes position at, stamped
	cs := wait(t, r.done, 1)
	if cs[0].Tag != 9 || cs[0].Code != abi.OK {
		t.Fatalf("completion %+v", cs[0])
	}
	r.settle(vm)
}

// TestPublishedGoesPastTheTail: the ring's published end is its tail and
// past it the entries stamped without a tail store (a writer that died
// between the two), not an entry stamped for another lap nor one never
// stamped: a ring of them at most.
func TestPublishedGoesPastTheTail(t *testing.T) {
	l := newBlockLayout(1, 8, false)
	blk := newBlock(l, make([]byte, l.size))
	rc := l.ringCap
	rec := abi.EncodeCommand(abi.Command{Op: abi.OpNop})
	base := 3*rc + 5
	for i := base - 4; i < base; i++ {
		blk.putEntry(i, 0, i, &rec)
	}
	if got := blk.published(); got != base {
		t.Fatalf("published %d with nothing past the tail, want %d", got, base)
	}
	stamp := func(i uint64) { blk.store(blk.entryOff(i)+entryStamp, i+1) }
	stamp(base)
	stamp(base + 1)
	stamp(base + 3) // past a gap: not published
	if got := blk.published(); got != base+2 {
		t.Fatalf("published %d, want %d: the two stamped entries past the tail", got, base+2)
	}
	blk.store(blk.entryOff(base+2)+entryStamp, base+2-rc+1) // a lap earlier
	if got := blk.published(); got != base+2 {
		t.Fatalf("published %d, want %d: an entry of another lap counted", got, base+2)
	}
	for i := base; i < base+rc; i++ {
		stamp(i) // the whole ring: its slots stamped for the lap past the tail
	}
	if got := blk.published(); got != base+rc {
		t.Fatalf("published %d, want %d: a whole ring", got, base+rc)
	}
}
