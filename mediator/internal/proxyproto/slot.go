package proxyproto

import (
	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

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
	area.Put64(base+abi.SysRet, uint64(ret)) // published by the swap below
	area.Put64(base+abi.SysErrno, uint64(errno))
	fin := uint64(abi.SlotWord(abi.SlotFinished, seq)) | uint64(uint32(errno))<<32
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
