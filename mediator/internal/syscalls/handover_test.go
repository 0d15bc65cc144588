package syscalls

import (
	"sync/atomic"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall"
)

// A forwarder started at the closed one's RingHead (a hand-over to a
// successor sluiced) serves the ring's next calls and none of the calls
// its predecessor served again.
func TestRingHeadHandedOver(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	a := ringArea(t, r)
	var ctr atomic.Uint64
	call := func(k uint64) {
		t.Helper()
		res, err := a.RingCall(0, &ctr, slotcall.Request{Number: abi.SysClose, Flags: abi.SysFlagBlocking, Args: [6]uint64{k}})
		if err != nil || res.Errno != 0 || res.Ret != int64(k+1) {
			t.Fatalf("call %d: %+v, %v", k, res, err)
		}
	}
	const before, after = 10, 7
	for k := range uint64(before) {
		call(k)
	}
	if err := r.f.Close(); err != nil {
		t.Fatal(err)
	}
	head := r.f.RingHead()
	if head != before {
		t.Fatalf("the closed forwarder's head %d, want %d", head, before)
	}
	succ, p := successor(t, r, head, nil)
	if succ.RingHead() != head {
		t.Fatalf("the successor starts at %d, want %d", succ.RingHead(), head)
	}
	for k := range uint64(after) {
		call(before + k)
	}
	if got := len(p.requests()); got != after {
		t.Fatalf("the successor's proxy got %d calls, want the %d made after the hand-over", got, after)
	}
}

// successor starts a forwarder on r's area, after r's (closed), reading
// the ring from head and storing its head in headStore (nil: nowhere),
// with a fake proxy; it is closed when the test ends.
func successor(t *testing.T, r *rig, head uint64, headStore *uint64) (*Forwarder, *fakeProxy) {
	t.Helper()
	return successorAnswered(t, r, head, headStore, nil)
}

// successorAnswered is successor after Orphans answered calls answered.
func successorAnswered(t *testing.T, r *rig, head uint64, headStore *uint64, answered []SlotCall) (*Forwarder, *fakeProxy) {
	t.Helper()
	p := &fakeProxy{}
	f, err := New(Spec{
		Name: "test", Area: r.area, Slots: rigSlots, Heap: r.heap, GPUNs: r.gpuNs.Load, RingHead: head, HeadStore: headStore, Answered: answered,
		Start: func() (Proxy, error) {
			p.mine, p.theirs = seqpacketPair(t)
			go p.serve(r.file)
			return p, nil
		},
	}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, p
}
