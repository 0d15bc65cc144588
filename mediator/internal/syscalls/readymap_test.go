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
