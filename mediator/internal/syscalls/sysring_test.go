package syscalls

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall"
)

// ringArea is the rig's area as a guest library sees it.
func ringArea(t *testing.T, r *rig) *slotcall.Area {
	t.Helper()
	a, err := slotcall.NewInRegion(r.area, 0, rigSlots)
	if err != nil {
		t.Fatal(err)
	}
	return a.WithTimeout(10 * time.Second)
}

// TestRingCallsServed has every slot's caller make blocking calls through
// the request ring at once, around it several times: each gets its own
// result, in its slot, and the ring counts them.
func TestRingCallsServed(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	a := ringArea(t, r)
	var ctr atomic.Uint64
	const rounds = 5 // positions wrap the ring 5 times
	var wg sync.WaitGroup
	for i := range uint32(rigSlots) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range uint64(rounds) {
				arg := uint64(i)<<8 | k
				res, err := a.RingCall(i, &ctr, slotcall.Request{Number: abi.SysClose, Flags: abi.SysFlagBlocking, Args: [6]uint64{arg}})
				if err != nil || res.Errno != 0 || res.Ret != int64(arg+1) {
					t.Errorf("slot %d call %d: %+v, %v; want ret %d", i, k, res, err, arg+1)
					return
				}
			}
		}()
	}
	wg.Wait()
	if s := r.f.Stats(); s.Ring != rigSlots*rounds || s.RingBad != 0 || s.RingSkipped != 0 || s.Calls["close"] != rigSlots*rounds {
		t.Errorf("stats: ring %d bad %d skipped %d close %d, want %d ring calls", s.Ring, s.RingBad, s.RingSkipped, s.Calls["close"], rigSlots*rounds)
	}
}

// TestRingNonBlockingFreesTheSlot: the host frees a non-blocking ring
// call's slot once it read the entry.
func TestRingNonBlockingFreesTheSlot(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	a := ringArea(t, r)
	var ctr atomic.Uint64
	_, seq := r.state(3)
	if _, err := a.RingCall(3, &ctr, slotcall.Request{Number: abi.SysNull}); err != nil {
		t.Fatal(err)
	}
	r.wait(3, abi.SlotFree)
	if _, got := r.state(3); got != abi.NextSeq(seq) {
		t.Errorf("slot freed with seq %d, want %d", got, abi.NextSeq(seq))
	}
	if n := r.f.Stats().NonBlocking; n != 1 {
		t.Errorf("non-blocking %d, want 1", n)
	}
}

// TestRingRefusals: an entry naming no slot of the area is dropped and
// counted; an unknown call number is answered ENOSYS in its slot; the ring
// goes on past both.
func TestRingRefusals(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	a := ringArea(t, r)
	var ctr atomic.Uint64
	pos := ctr.Add(1) - 1
	var b [abi.SyscallRingEntrySize]byte
	abi.EncodeRingEntry(b[:], abi.RingEntry{Tag: uint32(pos + 1), Slot: rigSlots, Call: abi.Slot{Number: abi.SysNull, Flags: abi.SysFlagBlocking}})
	r.area.CopyIn(abi.RingEntryOff(rigSlots, pos), b[:])
	if res, err := a.RingCall(1, &ctr, slotcall.Request{Number: 0x3ff, Flags: abi.SysFlagBlocking}); err != nil || res.Errno != abi.ErrnoNOSYS {
		t.Errorf("unknown call: %+v, %v; want ENOSYS", res, err)
	}
	if res, err := a.RingCall(2, &ctr, slotcall.Request{Number: abi.SysClose, Flags: abi.SysFlagBlocking, Args: [6]uint64{41}}); err != nil || res.Ret != 42 {
		t.Errorf("close after the refusals: %+v, %v; want 42", res, err)
	}
	if s := r.f.Stats(); s.RingBad != 1 || s.Ring != 3 {
		t.Errorf("ring %d bad %d, want 3 and 1", s.Ring, s.RingBad)
	}
}

// TestRingHoleSkipped: a position claimed and never written (its caller
// died) holds the ring up for abi.SyscallRingHoleNs at most once a later
// call is waiting; the poller then skips it, and a late write there is
// never served.
func TestRingHoleSkipped(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	a := ringArea(t, r)
	var ctr atomic.Uint64
	hole := ctr.Add(1) - 1
	start := time.Now()
	res, err := a.RingCall(5, &ctr, slotcall.Request{Number: abi.SysClose, Flags: abi.SysFlagBlocking, Args: [6]uint64{1}})
	if err != nil || res.Ret != 2 {
		t.Fatalf("call behind the hole: %+v, %v", res, err)
	}
	if d := time.Since(start); d < time.Duration(abi.SyscallRingHoleNs) {
		t.Errorf("served after %v: the hole was skipped before %v", d, time.Duration(abi.SyscallRingHoleNs))
	}
	if s := r.f.Stats(); s.RingSkipped != 1 {
		t.Errorf("skipped %d, want 1", s.RingSkipped)
	}
	// The late write: the slot it names stays PROCESSING, nothing answers.
	late, _ := a.Claim(6)
	var b [abi.SyscallRingEntrySize]byte
	abi.EncodeRingEntry(b[:], abi.RingEntry{Tag: uint32(hole + 1), Slot: 6, Call: abi.Slot{Seq: late.Seq, Number: abi.SysNull, Flags: abi.SysFlagBlocking}})
	r.area.Store32(abi.SlotOff(6), abi.SlotWord(abi.SlotProcessing, late.Seq))
	r.area.CopyIn(abi.RingEntryOff(rigSlots, hole), b[:])
	time.Sleep(20 * time.Millisecond)
	if st, _ := r.state(6); st != abi.SlotProcessing {
		t.Errorf("the late entry's slot is %v: it was served", st)
	}
}

// TestRingIdleCostsNoSkip: an idle ring (nothing claimed) is never skipped
// ahead, so a call made long after is still served.
func TestRingIdleCostsNoSkip(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	a := ringArea(t, r)
	time.Sleep(3 * time.Duration(ringLookNs))
	var ctr atomic.Uint64
	if res, err := a.RingCall(0, &ctr, slotcall.Request{Number: abi.SysClose, Flags: abi.SysFlagBlocking, Args: [6]uint64{7}}); err != nil || res.Ret != 8 {
		t.Fatalf("%+v, %v", res, err)
	}
	if s := r.f.Stats(); s.RingSkipped != 0 {
		t.Errorf("skipped %d on an idle ring", s.RingSkipped)
	}
}
