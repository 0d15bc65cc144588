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

func TestCompleteCall(t *testing.T) {
	w := make([]uint64, abi.SyscallAreaSize(4)/8)
	area := shm.New(unsafeBytes(w))
	r := Request{Slot: 1, Seq: 9, Number: abi.SysNull, Flags: abi.SysFlagBlocking, Context: 3}
	first := uint64(abi.SlotWord(abi.SlotProcessing, 9)) | uint64(CallWord(&r))<<32
	area.Store64(abi.SlotOff(1)+abi.SysState, first)
	if !CompleteCall(area, 1, 9, CallWord(&r), 5, 0) {
		t.Fatal("the call's slot, as the take left it, not completed")
	}
	if got := area.Load64(abi.SlotOff(1) + abi.SysState); got != uint64(abi.SlotWord(abi.SlotFinished, 9)) || area.Load64(abi.SlotOff(1)+abi.SysRet) != 5 {
		t.Fatalf("word %#x ret %d", got, area.Load64(abi.SlotOff(1)+abi.SysRet))
	}
	// The guest rewrote the call's number: the state word still decides.
	area.Store64(abi.SlotOff(2)+abi.SysState, first&0xffffffff|0x77<<32)
	if !CompleteCall(area, 2, 9, CallWord(&r), 6, abi.ErrnoIO) {
		t.Fatal("a PROCESSING|seq slot with another call word not completed")
	}
	if e := area.Load32(abi.SlotOff(2) + abi.SysState + 4); abi.Errno(e) != abi.ErrnoIO {
		t.Fatalf("errno %d", e)
	}
	// Another seq: nothing written.
	area.Store64(abi.SlotOff(3)+abi.SysState, first+1)
	area.Store64(abi.SlotOff(3)+abi.SysRet, 42)
	if CompleteCall(area, 3, 9, CallWord(&r), 0, 0) || area.Load64(abi.SlotOff(3)+abi.SysRet) != 42 {
		t.Fatal("a slot of another seq was written")
	}
}
