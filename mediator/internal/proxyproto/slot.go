package proxyproto

import (
	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// CallWord is what bytes 4..8 of a call's slot hold while it is READY or
// PROCESSING: its number, flags and context (FINISHED puts the errno there).
func CallWord(r *Request) uint32 {
	return uint32(r.Number) | uint32(r.Flags)<<16 | uint32(r.Context)<<24
}

// CompleteCall is CompleteSlot for a completer that knows the whole first
// word of the call's slot (seq, and the call's CallWord) and is its only
// writer while the call is PROCESSING (the proxy, which holds the call: the
// mediator writes a slot the proxy was given only once that proxy is gone).
// It uses no locked instruction: one load of the word (a line that the
// GPU's store of PROCESSING left in no core's cache comes back exclusive),
// the result's plain stores, and FINISHED as a release store, so the
// results of a batch go out through the store buffer back to back instead
// of each waiting for its line. A slot that is not exactly as the call left
// it goes the way of CompleteSlot; a guest that rewrites its slot between
// the load and the store has its word overwritten by FINISHED, which is the
// guest's own memory and the answer it asked for.
func CompleteCall(area *shm.Region, slot, seq, call uint32, ret int64, errno abi.Errno) bool {
	base := abi.SlotOff(slot)
	w := uint64(abi.SlotWord(abi.SlotProcessing, seq)) | uint64(call)<<32
	if area.Load64(base+abi.SysState) != w {
		return CompleteSlot(area, slot, seq, ret, errno)
	}
	area.Release64(base+abi.SysState, fill(area, base, seq, ret, errno))
	// The GPU polls this line over PCIe next: from the shared cache, not
	// by snooping this core for it.
	area.Demote(base)
	return true
}

// fill writes ret and errno into the slot at base and returns its
// FINISHED|seq word with the errno beside it: the caller's compare-and-swap
// of that word publishes them.
func fill(area *shm.Region, base uint64, seq uint32, ret int64, errno abi.Errno) uint64 {
	area.Put64(base+abi.SysRet, uint64(ret))
	area.Put64(base+abi.SysErrno, uint64(errno))
	return uint64(abi.SlotWord(abi.SlotFinished, seq)) | uint64(uint32(errno))<<32
}

// completeTries bounds CompleteSlot's compare-and-swap against a guest that
// keeps rewriting its slot's first word.
const completeTries = 8

// CompleteSlot writes a taken blocking call's result into slot of the
// syscall area and turns it from PROCESSING|seq to FINISHED|seq with the
// errno beside the state word (abi.FeatureResultWord), in one 8-byte
// compare-and-swap; false if the guest rewrote the state. The result is
// written only while the state is PROCESSING|seq. Whoever completes the
// call (the mediator, or the proxy when it holds the area) calls it; the
// compare-and-swap makes one of them the only writer.
func CompleteSlot(area *shm.Region, slot, seq uint32, ret int64, errno abi.Errno) bool {
	base := abi.SlotOff(slot)
	processing := abi.SlotWord(abi.SlotProcessing, seq)
	w := area.Load64(base + abi.SysState)
	if uint32(w) != processing {
		return false
	}
	fin := fill(area, base, seq, ret, errno)
	for range completeTries {
		if area.CompareAndSwap64(base+abi.SysState, w, fin) {
			return true
		}
		if w = area.Load64(base + abi.SysState); uint32(w) != processing {
			return false
		}
	}
	return false
}
