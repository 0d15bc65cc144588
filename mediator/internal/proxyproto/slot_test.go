package proxyproto

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

func TestCompleteSlot(t *testing.T) {
	w := make([]uint64, abi.SyscallAreaSize(4)/8)
	area := shm.New(unsafeBytes(w))
	st := func(slot uint32) (abi.SlotState, uint32) {
		return abi.SplitSlotWord(area.Load32(abi.SlotOff(slot) + abi.SysState))
	}
	area.Store32(abi.SlotOff(1)+abi.SysState, abi.SlotWord(abi.SlotProcessing, 7))
	if !CompleteSlot(area, 1, 7, -1, abi.ErrnoNOENT) {
		t.Fatal("a PROCESSING slot of the call's seq was not completed")
	}
	if s, seq := st(1); s != abi.SlotFinished || seq != 7 {
		t.Fatalf("state %v seq %d, want FINISHED 7", s, seq)
	}
	if ret, e := int64(area.Load64(abi.SlotOff(1)+abi.SysRet)), area.Load32(abi.SlotOff(1)+abi.SysState+4); ret != -1 || abi.Errno(e) != abi.ErrnoNOENT {
		t.Fatalf("ret %d, errno beside the state %d", ret, e)
	}
	// Completed once: a second completion (the mediator failing the call
	// after the proxy answered it) finds FINISHED and writes nothing.
	if CompleteSlot(area, 1, 7, -1, abi.ErrnoIO) {
		t.Fatal("completed twice")
	}
	if e := area.Load32(abi.SlotOff(1) + abi.SysState + 4); abi.Errno(e) != abi.ErrnoNOENT {
		t.Fatalf("errno overwritten: %d", e)
	}
	// Another sequence number, or a slot the guest rewrote: untouched.
	area.Store32(abi.SlotOff(2)+abi.SysState, abi.SlotWord(abi.SlotProcessing, 8))
	area.Store64(abi.SlotOff(2)+abi.SysRet, 42)
	if CompleteSlot(area, 2, 7, 0, 0) || area.Load64(abi.SlotOff(2)+abi.SysRet) != 42 {
		t.Fatal("a slot of another seq was written")
	}
	area.Store32(abi.SlotOff(3)+abi.SysState, abi.SlotWord(abi.SlotReady, 7))
	if CompleteSlot(area, 3, 7, 0, 0) {
		t.Fatal("a READY slot was completed")
	}
}
