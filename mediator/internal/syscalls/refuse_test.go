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
	go func() { defer close(done); Refuse(area, 64, stop) }()
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
