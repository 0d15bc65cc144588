package proxyproto

import (
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/sluice-gpu/sluice/api/abi"
)

func ringMem(t *testing.T, l RingLayout) []byte {
	t.Helper()
	// 8-byte aligned, as a mapping is.
	return unsafeBytes(make([]uint64, l.Size()/8))
}

func unsafeBytes(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)
}

func TestRingRoundTrip(t *testing.T) {
	l := RingLayout{ReqCap: 4, ResCap: 8}
	mem := ringMem(t, l)
	med, err := InitRing(mem, l)
	if err != nil {
		t.Fatal(err)
	}
	area := AreaSpec{Slots: 1024, Off: 1 << 20}
	got, size, gotArea, err := DecodeRing(AppendRing(nil, l, area))
	if err != nil || got != l || size != l.Size() || gotArea != area {
		t.Fatalf("DecodeRing = %+v %d %+v %v", got, size, gotArea, err)
	}
	prox, err := OpenRing(mem, l)
	if err != nil {
		t.Fatal(err)
	}
	var tail uint64
	if free := med.MediatorReqFree(tail, med.MediatorReqHead()); free != 4 {
		t.Fatalf("free %d, want 4", free)
	}
	for i := range 4 {
		r := Request{Slot: uint32(i), Seq: 9, Number: 17, Flags: 1, Context: 2, Args: [6]uint64{1, 2, 3, 4, 5, uint64(i)}, Aux: 7}
		med.MediatorPutRequest(tail, &r)
		tail++
	}
	if !med.MediatorPublish(tail) {
		t.Fatal("a fresh proxy is idle: the first batch kicks")
	}
	if med.MediatorPublish(tail) {
		t.Fatal("second kick for one sleep")
	}
	if free := med.MediatorReqFree(tail, med.MediatorReqHead()); free != 0 {
		t.Fatalf("free %d, want 0", free)
	}
	reqs, head, err := prox.ProxyRequests(nil, 0)
	if err != nil || head != 4 || len(reqs) != 4 || reqs[3].Args[5] != 3 || reqs[3].Aux != 7 || reqs[3].Context != 2 || reqs[3].Pos != 3 {
		t.Fatalf("ProxyRequests = %+v %d %v", reqs, head, err)
	}
	prox.ProxyConsumed(head)
	if free := med.MediatorReqFree(tail, med.MediatorReqHead()); free != 4 {
		t.Fatalf("free %d after consuming, want 4", free)
	}
	// Results: full after 8, in order, the ring reusable after consuming.
	var ptail atomic.Uint64
	for i := range 8 {
		if !prox.ProxyTryPut(&ptail, Result{Slot: uint32(i), Seq: 1, Ret: -int64(i), Errno: 5, Delivery: Delivery(i % 3)}) {
			t.Fatalf("put %d refused", i)
		}
	}
	if prox.ProxyTryPut(&ptail, Result{}) {
		t.Fatal("put into a full ring")
	}
	var rhead uint64
	for i := range 8 {
		r, ok := med.MediatorNextResult(rhead)
		if !ok || r != (Result{Slot: uint32(i), Seq: 1, Ret: -int64(i), Errno: 5, Delivery: Delivery(i % 3)}) {
			t.Fatalf("result %d: %+v %v", i, r, ok)
		}
		rhead++
	}
	if _, ok := med.MediatorNextResult(rhead); ok {
		t.Fatal("result from an empty ring")
	}
	if prox.ProxyTryPut(&ptail, Result{Slot: 99}) {
		t.Fatal("put before the consumer gave the records back")
	}
	med.MediatorConsumed(rhead)
	// A Bulk record: positions and a mask, nothing else.
	bulk := Result{Delivery: Bulk, Pos: 1 << 40, Mask: 0x8000_0000_0000_0005}
	if !prox.ProxyTryPut(&ptail, bulk) {
		t.Fatal("bulk put refused")
	}
	if r, ok := med.MediatorNextResult(rhead); !ok || r != bulk {
		t.Fatalf("bulk record read back as %+v %v", r, ok)
	}
	rhead++
	med.MediatorConsumed(rhead)
	if !prox.ProxyTryPut(&ptail, Result{Slot: 99}) {
		t.Fatal("put refused after the consumer freed the ring")
	}
	if r, ok := med.MediatorNextResult(rhead); !ok || r.Slot != 99 {
		t.Fatalf("wrapped result %+v %v", r, ok)
	}
}

// The mediator's side stays in bounds whatever the proxy writes.
func TestRingHostileProxy(t *testing.T) {
	l := RingLayout{ReqCap: 4, ResCap: 4}
	mem := ringMem(t, l)
	med, err := InitRing(mem, l)
	if err != nil {
		t.Fatal(err)
	}
	for i := range mem {
		mem[i] = 0xa5 // scribble over everything, header included
	}
	if free := med.MediatorReqFree(0, med.MediatorReqHead()); free != 0 {
		t.Fatalf("free %d with a garbage head, want 0 (full)", free)
	}
	for head := range uint64(64) {
		if _, ok := med.MediatorNextResult(head); ok {
			t.Fatalf("garbage mark accepted at %d", head)
		}
	}
	// A forged mark is exactly what a record looks like: accepted, and it
	// is the mediator's table that judges the result.
	le.PutUint64(mem[med.resOff:], 1)
	if _, ok := med.MediatorNextResult(0); !ok {
		t.Fatal("forged record not read")
	}
	if _, err := OpenRing(mem, l); err == nil {
		t.Fatal("OpenRing accepted a scribbled header")
	}
	if err := (RingLayout{ReqCap: 3, ResCap: 4}).Validate(); err == nil {
		t.Fatal("capacity 3 accepted")
	}
	if _, _, _, err := DecodeRing([]byte{MsgRing}); err == nil {
		t.Fatal("short ring message accepted")
	}
	if _, _, _, err := DecodeRing(AppendRing(nil, RingLayout{ReqCap: 4, ResCap: 4}, AreaSpec{Slots: abi.MaxSyscallSlots + 1})); err == nil {
		t.Fatal("an area of too many slots accepted")
	}
}

// Many producers, one consumer: every result arrives once.
func TestRingManyProducers(t *testing.T) {
	l := RingLayout{ReqCap: 2, ResCap: 16}
	mem := ringMem(t, l)
	med, err := InitRing(mem, l)
	if err != nil {
		t.Fatal(err)
	}
	prox, _ := OpenRing(mem, l)
	const producers, each = 4, 5000
	var tail atomic.Uint64
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				for !prox.ProxyTryPut(&tail, Result{Slot: uint32(p), Seq: uint32(i)}) {
				}
			}
		}()
	}
	next := make([]uint32, producers)
	var head uint64
	for n := 0; n < producers*each; {
		r, ok := med.MediatorNextResult(head)
		if !ok {
			continue
		}
		head++
		n++
		if n%5 == 0 {
			med.MediatorConsumed(head)
		}
		if r.Seq != next[r.Slot] {
			t.Fatalf("producer %d: got %d, want %d", r.Slot, r.Seq, next[r.Slot])
		}
		next[r.Slot]++
	}
	wg.Wait()
}

// TestRingArgsOnlyWhereAny: a call without arguments (a null call) writes
// its head alone, and reads back with zero arguments even where the same
// position held another call's arguments a lap before; one with any,
// or with aux alone, reads them all back.
func TestRingArgsOnlyWhereAny(t *testing.T) {
	l := RingLayout{ReqCap: 2, ResCap: 2}
	mem := ringMem(t, l)
	med, err := InitRing(mem, l)
	if err != nil {
		t.Fatal(err)
	}
	prox, err := OpenRing(mem, l)
	if err != nil {
		t.Fatal(err)
	}
	var head uint64
	for lap, r := range []Request{
		{Slot: 1, Seq: 2, Number: 3, Args: [6]uint64{9, 8, 7, 6, 5, 4}, Aux: 11}, // position 0
		{Slot: 1, Seq: 3, Number: 3, Aux: 12},                                    // 1
		{Slot: 5, Seq: 6, Number: abi.SysNull},                                   // 0 again: none of lap 0's
		{Slot: 5, Seq: 7, Number: abi.SysNull, Flags: 1, Context: 4},             // 1 again: none of lap 1's aux
	} {
		pos := uint64(lap)
		med.MediatorPutRequest(pos, &r)
		med.MediatorPublish(pos + 1)
		reqs, next, err := prox.ProxyRequests(nil, head)
		r.Pos = pos
		if err != nil || next != pos+1 || len(reqs) != 1 || reqs[0] != r {
			t.Fatalf("lap %d: %+v, %d, %v; want %+v", lap, reqs, next, err, r)
		}
		head = next
		prox.ProxyConsumed(head)
	}
}
