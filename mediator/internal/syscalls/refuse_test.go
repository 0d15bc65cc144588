package syscalls

import (
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

func TestRefuseAnswersEverythingWithEIO(t *testing.T) {
	area := shm.New(make([]byte, abi.SyscallAreaSize(64)))
	put := func(i uint32, s abi.Slot) {
		var b [abi.SyscallSlotSize]byte
		abi.EncodeSlot(b[:], s)
		area.CopyIn(abi.SlotOff(i), b[:])
	}
	put(1, abi.Slot{State: abi.SlotReady, Seq: 5, Number: abi.SysNull, Flags: abi.SysFlagBlocking})
	put(2, abi.Slot{State: abi.SlotReady, Seq: 9, Number: abi.SysWrite})
	put(3, abi.Slot{State: abi.SlotPopulating, Seq: 2, Number: abi.SysNull, Flags: abi.SysFlagBlocking})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); Refuse(area, 64, 0, stop) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := abi.SplitSlotWord(area.Load32(abi.SlotOff(1) + abi.SysState))
		if st == abi.SlotFinished || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	<-done
	off := abi.SlotOff(1)
	if st, seq := abi.SplitSlotWord(area.Load32(off + abi.SysState)); st != abi.SlotFinished || seq != 5 {
		t.Fatalf("blocking call: %v seq %d, want finished seq 5", st, seq)
	}
	if ret, errno, fin := int64(area.Load64(off+abi.SysRet)), area.Load64(off+abi.SysErrno), area.Load32(off+abi.SysFinErrno); ret != -1 || errno != uint64(abi.ErrnoIO) || fin != uint32(abi.ErrnoIO) {
		t.Fatalf("blocking call's result: ret %d errno %d result word %d, want -1, EIO, EIO", ret, errno, fin)
	}
	if st, seq := abi.SplitSlotWord(area.Load32(abi.SlotOff(2) + abi.SysState)); st != abi.SlotFree || seq != 10 {
		t.Fatalf("non-blocking call: %v seq %d, want free seq 10", st, seq)
	}
	if st, _ := abi.SplitSlotWord(area.Load32(abi.SlotOff(3) + abi.SysState)); st != abi.SlotPopulating {
		t.Fatalf("a slot being written: %v, want it left alone", st)
	}
}

// TestRefuseAnswersTheRing: calls published through the request ring after
// the forwarder closed are answered EIO (blocking) or freed (non-blocking),
// from the forwarder's head on, a claimed entry never written skipped after
// abi.SyscallRingHoleNs.
func TestRefuseAnswersTheRing(t *testing.T) {
	const slots = 64
	area := shm.New(make([]byte, abi.SyscallAreaSize(slots)))
	publish := func(pos uint64, slot, seq uint32, flags uint8) {
		s := abi.Slot{Seq: seq, Number: abi.SysNull, Flags: flags}
		area.Store64(abi.SlotOff(slot), uint64(abi.SlotWord(abi.SlotProcessing, seq))|uint64(abi.CallWord(&s))<<32)
		var b [abi.SyscallRingEntrySize]byte
		abi.EncodeRingEntry(b[:], abi.RingEntry{Tag: uint32(pos + 1), Slot: slot, Call: s})
		area.CopyIn(abi.RingEntryOff(slots, pos), b[:])
	}
	// An entry before the head is the forwarder's: left alone.
	publish(2, 4, 1, abi.SysFlagBlocking)
	publish(3, 5, 7, abi.SysFlagBlocking)
	publish(4, 6, 8, 0)
	publish(6, 7, 9, abi.SysFlagBlocking) // position 5 claimed, never written
	stop, done := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() { defer close(done); Refuse(area, slots, 3, stop) }()
	state := func(i uint32) (abi.SlotState, uint32) { return abi.SplitSlotWord(area.Load32(abi.SlotOff(i))) }
	deadline := time.Now().Add(5 * time.Second)
	for st, _ := state(7); st != abi.SlotFinished && time.Now().Before(deadline); st, _ = state(7) {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	<-done
	if d := time.Since(start); d < time.Duration(abi.SyscallRingHoleNs) {
		t.Errorf("the call behind the hole was answered after %v, before the hole's %v", d, time.Duration(abi.SyscallRingHoleNs))
	}
	for _, c := range []struct {
		slot uint32
		st   abi.SlotState
		seq  uint32
	}{{4, abi.SlotProcessing, 1}, {5, abi.SlotFinished, 7}, {6, abi.SlotFree, 9}, {7, abi.SlotFinished, 9}} {
		if st, seq := state(c.slot); st != c.st || seq != c.seq {
			t.Errorf("slot %d: %v seq %d, want %v seq %d", c.slot, st, seq, c.st, c.seq)
		}
	}
	if errno := area.Load64(abi.SlotOff(5) + abi.SysErrno); errno != uint64(abi.ErrnoIO) {
		t.Errorf("blocking ring call's errno %d, want EIO", errno)
	}
}
