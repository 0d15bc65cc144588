package syscalls

import (
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// Orphans answers, before a forwarder starts on an area whose previous
// forwarder crashed, the calls that one took and never answered: every
// slot in PROCESSING whose call is not waiting in the request ring from
// head (Spec.HeadStore: the crashed poller stored it before serving each
// entry it took) gets EIO, a blocking call's in its slot, a non-blocking
// call's slot freed. So no caller waits forever, and no call runs twice:
// the calls the crashed forwarder took are never served again, those it
// had not are served by the next. A slot its caller is still publishing
// in the ring (PROCESSING before its entry is written) is not an orphan:
// a slot is answered only if it is PROCESSING, with the same call, and
// not in the ring both before and after grace (abi.SyscallRingHoleNs is
// how long the protocol gives a caller to write its entry). A caller
// stalled longer than that, whose entry comes after all, must not have
// its call both answered and run: Orphans returns the calls it answered,
// and the next forwarder (Spec.Answered) consumes a ring entry that names
// one without serving it. Like everything in the area the slots are the
// guest's: a state word rewritten meanwhile is left alone.
func Orphans(area *shm.Region, slots int, head uint64, grace time.Duration) []SlotCall {
	first := orphanCandidates(area, slots, head)
	if len(first) == 0 {
		return nil
	}
	time.Sleep(grace)
	again := orphanCandidates(area, slots, head)
	var answered []SlotCall
	for slot, w := range first {
		if again[slot] != w {
			continue // answered, taken by its caller again, or now in the ring
		}
		st, seq := abi.SplitSlotWord(uint32(w))
		if st != abi.SlotProcessing {
			continue
		}
		if uint8(w>>48)&abi.SysFlagBlocking == 0 { // the u8 flags at SysFlags
			if area.CompareAndSwap32(abi.SlotOff(slot)+abi.SysState, uint32(w), abi.SlotWord(abi.SlotFree, abi.NextSeq(seq))) {
				answered = append(answered, SlotCall{Slot: slot, Seq: seq})
			}
			continue
		}
		if proxyproto.CompleteSlot(area, slot, seq, -1, abi.ErrnoIO) {
			answered = append(answered, SlotCall{Slot: slot, Seq: seq})
		}
	}
	return answered
}

// SlotCall is one call of a slot: the slot and the call's sequence number.
type SlotCall struct {
	Slot, Seq uint32
}

// answeredCalls are the calls Orphans answered (Spec.Answered) whose
// ring entry may still come, by slot. A caller holds its slot until the
// host consumes its entry, so its entry comes before any later call of
// the slot in the ring: an entry of the slot read from the ring settles
// it either way.
type answeredCalls map[uint32]uint32

func newAnsweredCalls(calls []SlotCall) answeredCalls {
	if len(calls) == 0 {
		return nil
	}
	m := answeredCalls{}
	for _, c := range calls {
		m[c.Slot] = c.Seq
	}
	return m
}

// stale reports whether a ring entry of slot's call seq is one Orphans
// answered, which must not run.
func (a answeredCalls) stale(slot, seq uint32) bool {
	if a == nil {
		return false
	}
	s, ok := a[slot]
	if !ok {
		return false
	}
	delete(a, slot)
	return s == seq
}

// orphanCandidates are the area's PROCESSING slots (their first 8 bytes:
// state word and call word) whose call is not one of the ring's entries
// ready from head on.
func orphanCandidates(area *shm.Region, slots int, head uint64) map[uint32]uint64 {
	pending := map[uint64]bool{} // slot<<32 | seq of the ring's ready entries
	forReady(area, slots, head, func(_, off uint64) {
		slot, seq := area.Load32(off+abi.RingSlot), area.Load32(off+abi.RingSeq)
		pending[uint64(slot)<<32|uint64(seq)] = true
	})
	out := map[uint32]uint64{}
	for i := range uint32(slots) {
		w := area.Load64(abi.SlotOff(i) + abi.SysState)
		st, seq := abi.SplitSlotWord(uint32(w))
		if st == abi.SlotProcessing && !pending[uint64(i)<<32|uint64(seq)] {
			out[i] = w
		}
	}
	return out
}

// ReadyEnd is the position after the last entry of the request ring that
// holds its call in [head, head+slots), head if none does: where a claim
// counter made again after a crash must start. The entries the crashed
// forwarder had not read are still there, and the next forwarder serves
// them from head; a counter started at head would give new calls their
// positions, which the forwarder passes (its head never goes back), and
// their callers would wait forever.
func ReadyEnd(area *shm.Region, slots int, head uint64) uint64 {
	end := head
	forReady(area, slots, head, func(pos, _ uint64) { end = pos + 1 })
	return end
}

// forReady calls fn, in order, with the position and offset of each entry
// of the request ring that holds its call in [head, head+slots).
func forReady(area *shm.Region, slots int, head uint64, fn func(pos, off uint64)) {
	for pos := head; pos < head+uint64(slots); pos++ {
		if off := abi.RingEntryOff(slots, pos); area.Load32(off+abi.RingTag) == uint32(pos+1) {
			fn(pos, off)
		}
	}
}
