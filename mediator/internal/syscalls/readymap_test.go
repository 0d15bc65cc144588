package syscalls

import (
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
)

// A hint that lands before its slot's READY is kept until READY shows, then
// the call is served and the hint cleared; a hint for a FREE slot is
// dropped.
func TestReadyMapHints(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	hint := func(i uint32) uint64 { return abi.SyscallReadyMapOff + uint64(i) }
	hinted := func(i uint32) bool { return r.area.Load32(hint(i)&^3)>>(8*(hint(i)&3))&0xff != 0 }
	setHint := func(i uint32) {
		w := hint(i) &^ 3
		r.area.Store32(w, r.area.Load32(w)|1<<(8*(hint(i)&3)))
	}
	r.call(0, abi.SysNull, 0) // the proxy is up

	// Slot 6: the hint first, the slot still being written.
	r.area.Store32(abi.SlotOff(6)+abi.SysState, abi.SlotWord(abi.SlotPopulating, 0))
	setHint(6)
	// Slot 9: a hint for a slot nobody published.
	setHint(9)
	time.Sleep(20 * time.Millisecond) // many passes
	if !hinted(6) {
		t.Fatal("the hint of a slot still POPULATING was dropped")
	}
	if hinted(9) {
		t.Fatal("the hint of a FREE slot was kept")
	}
	if st, _ := r.state(6); st != abi.SlotPopulating {
		t.Fatalf("slot 6 was taken while POPULATING: %v", st)
	}
	r.publish(6, abi.Slot{Number: abi.SysLseek, Flags: abi.SysFlagBlocking, Args: [6]uint64{1}})
	if ret, errno := r.wait(6, abi.SlotFinished); ret != 2 || errno != 0 {
		t.Fatalf("slot 6: ret %d errno %d", ret, errno)
	}
	deadline := time.Now().Add(time.Second)
	for hinted(6) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if hinted(6) {
		t.Fatal("the hint of a served slot stayed")
	}
}

// Eight hints in one map word are served from one pass's clear; hint bytes
// past the last slot (a hostile guest's) are never read.
func TestReadyMapWordOfHints(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	r.call(0, abi.SysNull, 0) // the proxy is up
	for i := uint32(8); i < 16; i++ {
		r.publish(i, abi.Slot{Number: abi.SysLseek, Flags: abi.SysFlagBlocking, Args: [6]uint64{uint64(i)}})
	}
	past := uint64(abi.SyscallReadyMapOff + rigSlots) // the bytes of slots 64..71: none exist
	r.area.Store64(past, ^uint64(0))
	r.area.Store64(abi.SyscallReadyMapOff+8, 0x0101010101010101)
	for i := uint32(8); i < 16; i++ {
		if ret, errno := r.wait(i, abi.SlotFinished); ret != int64(i)+1 || errno != 0 {
			t.Fatalf("slot %d: ret %d errno %d", i, ret, errno)
		}
	}
	deadline := time.Now().Add(time.Second)
	for r.area.Load64(abi.SyscallReadyMapOff+8) != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if w := r.area.Load64(abi.SyscallReadyMapOff + 8); w != 0 {
		t.Fatalf("hints of served slots left: %#x", w)
	}
	if st := r.f.Stats(); st.Calls["unknown"] != 0 || st.Raced != 0 {
		t.Fatalf("the bytes past the slots were acted on: %+v", st)
	}
}

// A guest that sets no hints is still served while the poller never goes
// idle (another caller keeps it busy): by the sweep, a chunk per pass.
func TestSweepServesUnhintedSlotsWhileBusy(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	r.call(0, abi.SysNull, 0)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // slot 1: hinted calls back to back
		defer close(done)
		for seq := uint32(0); ; seq = abi.NextSeq(seq) {
			select {
			case <-stop:
				return
			default:
			}
			r.publish(1, abi.Slot{Seq: seq, Number: abi.SysNull, Flags: abi.SysFlagBlocking})
			w := uint64(abi.SyscallReadyMapOff)
			r.area.Store32(w, r.area.Load32(w)|1<<8)
			for st, _ := r.state(1); st != abi.SlotFinished; st, _ = r.state(1) {
			}
			r.area.Store32(abi.SlotOff(1)+abi.SysState, abi.SlotWord(abi.SlotFree, abi.NextSeq(seq)))
		}
	}()
	defer func() { close(stop); <-done }()
	time.Sleep(5 * time.Millisecond)
	passes := r.f.Stats().ScanPasses
	r.publish(40, abi.Slot{Number: abi.SysLseek, Flags: abi.SysFlagBlocking, Args: [6]uint64{41}})
	if ret, errno := r.wait(40, abi.SlotFinished); ret != 42 || errno != 0 {
		t.Fatalf("slot 40: ret %d errno %d", ret, errno)
	}
	if r.f.Stats().ScanPasses == passes {
		t.Fatal("no pass between the publish and the result")
	}
}
