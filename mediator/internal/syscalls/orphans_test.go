package syscalls

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/internal/slotcall"
)

// Orphans answers the calls a crashed forwarder took and did not answer,
// and leaves alone those waiting in the ring from the head (a successor
// serves them), those being published meanwhile, and READY slots.
func TestOrphans(t *testing.T) {
	mem, _ := mapShared(t, int(abi.SyscallAreaSize(rigSlots)))
	area := shm.New(mem)
	slot := func(i uint32, st abi.SlotState, seq uint32, flags uint8) {
		abi.EncodeSlot(mem[abi.SlotOff(i):], abi.Slot{State: st, Seq: seq, Number: abi.SysClose, Flags: flags})
	}
	entry := func(pos uint64, i, seq uint32) {
		abi.EncodeRingEntry(mem[abi.RingEntryOff(rigSlots, pos):], abi.RingEntry{Tag: uint32(pos + 1), Slot: i,
			Call: abi.Slot{Seq: seq, Number: abi.SysClose, Flags: abi.SysFlagBlocking}})
	}
	const head = 5
	slot(0, abi.SlotProcessing, 1, abi.SysFlagBlocking) // in the ring at the head: waits for the successor
	entry(head, 0, 1)
	slot(1, abi.SlotProcessing, 2, abi.SysFlagBlocking) // taken (position 3, before the head): EIO
	entry(3, 1, 2)
	slot(2, abi.SlotProcessing, 3, 0)                   // a non-blocking call taken: its slot freed
	slot(3, abi.SlotReady, 4, abi.SysFlagBlocking)      // a slot call not taken: left for the successor
	slot(4, abi.SlotProcessing, 5, abi.SysFlagBlocking) // its caller publishes during the grace
	go func() {
		time.Sleep(5 * time.Millisecond)
		entry(head+1, 4, 5)
	}()
	if got := Orphans(area, rigSlots, head, 200*time.Millisecond); len(got) != 2 {
		t.Errorf("answered %v, want slots 1 and 2", got)
	}
	state := func(i uint32) (abi.SlotState, uint32) {
		return abi.SplitSlotWord(area.Load32(abi.SlotOff(i) + abi.SysState))
	}
	want := []struct {
		st  abi.SlotState
		seq uint32
	}{{abi.SlotProcessing, 1}, {abi.SlotFinished, 2}, {abi.SlotFree, 4}, {abi.SlotReady, 4}, {abi.SlotProcessing, 5}}
	for i, w := range want {
		if st, seq := state(uint32(i)); st != w.st || seq != w.seq {
			t.Errorf("slot %d: state %v seq %d, want %v %d", i, st, seq, w.st, w.seq)
		}
	}
	if e := area.Load32(abi.SlotOff(1) + abi.SysFinErrno); abi.Errno(e) != abi.ErrnoIO {
		t.Errorf("slot 1's errno %d, want EIO", e)
	}
}

// A forwarder with a HeadStore stores the ring's head there for each
// call it takes, before it serves it.
func TestHeadStore(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	r.f.Close()
	// A mapping, as in production (the race detector does not watch
	// mappings: the poller's plain store is read by another process there).
	m, _ := mapShared(t, 4096)
	word := (*uint64)(unsafe.Pointer(&m[0]))
	successor(t, r, 0, word)
	a := ringArea(t, r)
	var ctr atomic.Uint64
	for k := range uint64(4) {
		res, err := a.RingCall(0, &ctr, slotcall.Request{Number: abi.SysClose, Flags: abi.SysFlagBlocking, Args: [6]uint64{k}})
		if err != nil || res.Errno != 0 {
			t.Fatalf("call %d: %+v, %v", k, res, err)
		}
		if got := atomic.LoadUint64(word); got != k+1 {
			t.Fatalf("after call %d the stored head is %d, want %d", k, got, k+1)
		}
	}
}

// ReadyEnd is past every entry that holds its call from the head on, holes
// and stale entries (tags of an earlier lap) aside: where a claim counter
// made again after a crash starts, so that new calls never land where the
// next forwarder has already read.
func TestReadyEnd(t *testing.T) {
	mem, _ := mapShared(t, int(abi.SyscallAreaSize(rigSlots)))
	area := shm.New(mem)
	entry := func(pos uint64, tag uint32) {
		abi.EncodeRingEntry(mem[abi.RingEntryOff(rigSlots, pos):], abi.RingEntry{Tag: tag, Call: abi.Slot{Number: abi.SysNull}})
	}
	const head = 5
	if got := ReadyEnd(area, rigSlots, head); got != head {
		t.Errorf("an empty ring: %d, want the head %d", got, head)
	}
	entry(head, head+1)
	entry(head+2, head+3) // head+1 a hole: claimed, never written
	entry(head+3, 1)      // a stale tag: an earlier lap's
	if got := ReadyEnd(area, rigSlots, head); got != head+3 {
		t.Errorf("entries at the head and two past it: %d, want %d", got, head+3)
	}
}

// A caller stalled past Orphans' grace, between its slot's PROCESSING and
// its ring entry, gets EIO; its entry, written afterwards, is consumed by
// the next forwarder without running (before, it got EIO and ran too),
// and the calls after it are served.
func TestOrphanAnsweredNeverRuns(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	r.f.Close()
	mem := r.area.Bytes(0, abi.SyscallAreaSize(rigSlots))
	abi.EncodeSlot(mem[abi.SlotOff(1):], abi.Slot{State: abi.SlotProcessing, Seq: 2, Number: abi.SysClose, Flags: abi.SysFlagBlocking})
	answered := Orphans(r.area, rigSlots, 0, time.Millisecond)
	if len(answered) != 1 || answered[0] != (SlotCall{Slot: 1, Seq: 2}) {
		t.Fatalf("answered %v, want slot 1's call 2", answered)
	}
	// The stalled caller writes its entry now, at the position it claimed.
	abi.EncodeRingEntry(mem[abi.RingEntryOff(rigSlots, 0):], abi.RingEntry{Tag: 1, Slot: 1,
		Call: abi.Slot{Seq: 2, Number: abi.SysClose, Flags: abi.SysFlagBlocking, Args: [6]uint64{77}}})
	_, p := successorAnswered(t, r, 0, nil, answered)
	a := ringArea(t, r)
	var ctr atomic.Uint64
	ctr.Store(1)
	res, err := a.RingCall(3, &ctr, slotcall.Request{Number: abi.SysClose, Flags: abi.SysFlagBlocking, Args: [6]uint64{88}})
	if err != nil || res.Errno != 0 {
		t.Fatalf("the call after it: %+v, %v", res, err)
	}
	for _, req := range p.requests() {
		if req.Args[0] == 77 {
			t.Fatalf("the call answered with EIO ran too: %+v", req)
		}
	}
	if st, seq := abi.SplitSlotWord(r.area.Load32(abi.SlotOff(1) + abi.SysState)); st != abi.SlotFinished || seq != 2 ||
		abi.Errno(r.area.Load32(abi.SlotOff(1)+abi.SysFinErrno)) != abi.ErrnoIO {
		t.Fatalf("slot 1: %v %d, want FINISHED 2 with EIO", st, seq)
	}
}
