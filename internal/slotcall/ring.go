package slotcall

import (
	"sync/atomic"

	"github.com/sluice-gpu/sluice/api/abi"
)

// RingCall makes one call through the area's request ring
// (abi.FeatureSyscallRing): Claim slot, PublishRing with the VM's claim
// counter ctr, and for a blocking request Wait. A non-blocking call returns
// a zero Result once published (the host frees the slot when it reads the
// entry).
func (a *Area) RingCall(slot uint32, ctr *atomic.Uint64, req Request) (Result, error) {
	t, err := a.Claim(slot)
	if err != nil {
		return Result{}, err
	}
	a.PublishRing(t, ctr, req)
	if !req.Blocking() {
		return Result{}, nil
	}
	return a.Wait(t)
}

// PublishRing hands the call of claimed slot t to the host through the
// request ring: the slot becomes PROCESSING|s with the call's number, flags
// and context beside it, a position is claimed from ctr (one counter for
// every ring caller of the area), its entry is written and its tag stored
// last. req.Cookie is not carried (the slot keeps its own).
func (a *Area) PublishRing(t Ticket, ctr *atomic.Uint64, req Request) {
	call := uint32(req.Number) | uint32(req.Flags)<<16 | uint32(req.Context)<<24
	a.r.Store64(a.off+abi.SlotOff(t.Slot), uint64(abi.SlotWord(abi.SlotProcessing, t.Seq))|uint64(call)<<32)
	pos := ctr.Add(1) - 1
	e := a.off + abi.RingEntryOff(int(a.slots), pos)
	a.r.Store32(e+abi.RingNumber, call)
	for i, v := range req.Args {
		a.r.Store64(e+abi.RingArgs+8*uint64(i), v)
	}
	a.r.Store64(e+abi.RingSlot, uint64(t.Slot)|uint64(t.Seq&abi.SlotSeqMask)<<32)
	a.r.Store32(e+abi.RingTag, uint32(pos+1))
}

// RingTag reads the tag of position pos's entry (for tests).
func (a *Area) RingTag(pos uint64) uint32 {
	return a.r.Load32(a.off + abi.RingEntryOff(int(a.slots), pos) + abi.RingTag)
}
