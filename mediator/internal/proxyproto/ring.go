package proxyproto

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// # Rings (protocol version 3)
//
// Calls and results travel through two rings in a memfd the mediator creates
// for each proxy it starts and sends, right after the proxy's Ready, as the
// first descriptor of a MsgRing datagram; the socket stays for the
// handshake, MsgFastcall (a descriptor travels with it) and kicks.
//
//	0     u32 magic, u32 version, u32 request capacity, u32 result capacity
//	64    u64 request tail    (mediator writes: requests published)
//	128   u64 request head    (proxy writes: requests consumed)
//	192   u32 proxy idle      (1: the proxy sleeps on its socket; kick it)
//	256   u64 result head     (mediator writes: results consumed)
//	320   u32 mediator idle   (1: no mediator thread watches the results; kick it)
//	4096  request heads: capacity × 16 bytes (u32 slot, u32 seq, u16 number,
//	      u8 flags, u8 context, u8 more, 3 zero bytes)
//	...   request args: capacity × 56 bytes (six u64 arguments, u64 aux),
//	      64-byte aligned; a position's are read only when its head's more
//	      is 1 (written only then: a call without arguments, a null call,
//	      moves a quarter of a cache line between the cores, not two lines)
//	...   results: capacity × ResultStride bytes (64-byte aligned)
//
// The request ring has one producer (the forwarder's poller) and one
// consumer (the proxy's receive loop). The result ring has many producers
// (the receive loop and every context thread) and one consumer at a time
// (the forwarder's poller, or its receiver when kicked): a bounded MPSC ring
// after Vyukov, where each record's mark says whether it holds a result:
// pos+1 once the producer of position pos published it. Producers reserve
// positions with compare-and-swap on a counter of the proxy's own, and only
// positions less than a capacity past the result head, which the consumer
// stores once per drain (no store per record). The consumer keeps its own
// head and accepts a record only when its mark is exactly head+1, so a
// proxy that scribbles on the ring can make it read garbage results (which
// the mediator checks against its own table of calls in flight, as it did
// the socket's) but never read outside the ring or loop.
//
// # Results the proxy writes itself
//
// When the MsgRing carries a second descriptor, the VM's syscall area (the
// memfd of the VM's region, the area at an offset), the proxy writes each
// blocking call's result into its slot and moves it from PROCESSING|seq to
// FINISHED|seq itself (CompleteSlot, one compare-and-swap), then publishes
// the result record marked ByProxy: the mediator then only ends its
// tracking of the call. The GPU thread waiting on the slot is answered one
// hop earlier, and the mediator's poller does not touch the slot again.
// The area is the VM's own memory, as the heap the proxy already writes is:
// a proxy that misbehaves there harms its VM alone.
//
// Wakeups (virtio's event index idea): a side that stops watching its ring
// stores 1 in its idle word, looks at the ring once more, and only then
// blocks on the socket; a producer that finds the peer idle swaps the word
// back to 0 and sends one MsgKick. Both sides' atomics are sequentially
// consistent, so a producer's store of the tail (or mark) and a consumer's
// store of its idle word cannot both be missed by the other's later load.
const (
	RingMagic    = 0x53524e47 // "SRNG"
	RingHdrSize  = 4096
	ResultStride = 32

	ringReqTail  = 64
	ringReqHead  = 128
	ringProxyIdl = 192
	ringResHead  = 256
	ringMedIdle  = 320

	// MaxRingCap bounds either ring's capacity.
	MaxRingCap = 1 << 16
)

// More message types.
const (
	// MsgRing (mediator → proxy): u32 request capacity, u32 result
	// capacity, u32 size, u32 slots, u64 area offset; the rings' memfd
	// travels as SCM_RIGHTS, and, when slots is not 0, the syscall area's
	// memfd after it (the area at the offset).
	MsgRing byte = 6
	// MsgKick (either way, 1 byte): look at your ring.
	MsgKick byte = 7
)

// RingMsgSize is a MsgRing datagram's size.
const RingMsgSize = 32

// AreaSpec says where the VM's syscall area is in the descriptor that
// follows the rings' in a MsgRing: Slots 0 means none is handed over.
type AreaSpec struct {
	Slots uint32
	Off   uint64
}

// RingLayout is the capacities of a ring pair (powers of two).
type RingLayout struct{ ReqCap, ResCap uint32 }

// The request ring's two arrays (see the package doc).
const (
	reqHeadSize  = 16
	reqArgsSize  = 56
	headsPerLine = 64 / reqHeadSize
	putAhead     = 4 * headsPerLine // heads ahead of the one written whose line is asked for
)

func (l RingLayout) argsOff() uint64 {
	return (RingHdrSize + uint64(l.ReqCap)*reqHeadSize + 63) &^ 63
}

func (l RingLayout) resOff() uint64 {
	return (l.argsOff() + uint64(l.ReqCap)*reqArgsSize + 63) &^ 63
}

// Size is the memory the rings take, rounded up to pages.
func (l RingLayout) Size() int {
	n := l.resOff() + uint64(l.ResCap)*ResultStride
	return int((n + 4095) &^ 4095)
}

// Validate checks the capacities.
func (l RingLayout) Validate() error {
	ok := func(c uint32) bool { return c >= 2 && c <= MaxRingCap && c&(c-1) == 0 }
	if !ok(l.ReqCap) || !ok(l.ResCap) {
		return fmt.Errorf("%w: ring capacities %d/%d", ErrMessage, l.ReqCap, l.ResCap)
	}
	return nil
}

// AppendRing appends a MsgRing datagram.
func AppendRing(b []byte, l RingLayout, a AreaSpec) []byte {
	b = append(b, MsgRing, 0, 0, 0)
	b = le.AppendUint32(b, l.ReqCap)
	b = le.AppendUint32(b, l.ResCap)
	b = le.AppendUint32(b, uint32(l.Size()))
	b = le.AppendUint32(b, a.Slots)
	b = le.AppendUint32(b, 0)
	return le.AppendUint64(b, a.Off)
}

// DecodeRing decodes a MsgRing datagram.
func DecodeRing(msg []byte) (RingLayout, int, AreaSpec, error) {
	if len(msg) != RingMsgSize || msg[0] != MsgRing {
		return RingLayout{}, 0, AreaSpec{}, fmt.Errorf("%w: ring message of %d bytes", ErrMessage, len(msg))
	}
	l := RingLayout{ReqCap: le.Uint32(msg[4:]), ResCap: le.Uint32(msg[8:])}
	if err := l.Validate(); err != nil {
		return l, 0, AreaSpec{}, err
	}
	if int(le.Uint32(msg[12:])) != l.Size() {
		return l, 0, AreaSpec{}, fmt.Errorf("%w: ring of %d bytes, want %d", ErrMessage, le.Uint32(msg[12:]), l.Size())
	}
	a := AreaSpec{Slots: le.Uint32(msg[16:]), Off: le.Uint64(msg[24:])}
	if a.Slots > abi.MaxSyscallSlots {
		return l, 0, AreaSpec{}, fmt.Errorf("%w: an area of %d slots", ErrMessage, a.Slots)
	}
	return l, l.Size(), a, nil
}

// Ring is a view of a ring pair in shared memory; either side's methods are
// its own (Mediator*, Proxy*). Neither side keeps state in it it relies on:
// indices a side owns live in the side's own memory.
type Ring struct {
	r              *shm.Region
	l              RingLayout
	reqMask        uint64
	resMask        uint64
	resOff, resCap uint64
	argsOff        uint64
}

// InitRing lays out a fresh ring pair in b (at least l.Size() bytes, zeroed,
// 8-byte aligned): the mediator's side, before the proxy sees it. Both idle
// words start at 1 (nobody watches yet).
func InitRing(b []byte, l RingLayout) (*Ring, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if len(b) < l.Size() {
		return nil, fmt.Errorf("%w: ring memory of %d bytes, want %d", ErrMessage, len(b), l.Size())
	}
	rg := newRing(b, l)
	rg.r.Store32(0, RingMagic)
	rg.r.Store32(4, Version)
	rg.r.Store32(8, l.ReqCap)
	rg.r.Store32(12, l.ResCap)
	for i := range rg.resCap {
		rg.r.Store64(rg.resOff+i*ResultStride, i) // not i+1: nothing published
	}
	rg.r.Store32(ringProxyIdl, 1)
	rg.r.Store32(ringMedIdle, 1)
	return rg, nil
}

// OpenRing is the proxy's view of the rings the mediator laid out in b.
func OpenRing(b []byte, l RingLayout) (*Ring, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if len(b) < l.Size() {
		return nil, fmt.Errorf("%w: ring memory of %d bytes, want %d", ErrMessage, len(b), l.Size())
	}
	rg := newRing(b, l)
	if rg.r.Load32(0) != RingMagic || rg.r.Load32(4) != Version || rg.r.Load32(8) != l.ReqCap || rg.r.Load32(12) != l.ResCap {
		return nil, fmt.Errorf("%w: ring header does not match", ErrMessage)
	}
	return rg, nil
}

func newRing(b []byte, l RingLayout) *Ring {
	return &Ring{
		r: shm.New(b[:l.Size()]), l: l,
		reqMask: uint64(l.ReqCap) - 1, resMask: uint64(l.ResCap) - 1,
		resOff: l.resOff(), resCap: uint64(l.ResCap), argsOff: l.argsOff(),
	}
}

// Layout returns the ring's capacities.
func (rg *Ring) Layout() RingLayout { return rg.l }

// --- The mediator's side. The proxy's words are hostile: bounded here. ---

// MediatorReqHead is the proxy's request head: the requests before it are
// consumed. A mediator that reads it before it drains the result ring has
// seen every Bulk record of the requests before it.
func (rg *Ring) MediatorReqHead() uint64 { return rg.r.Load64(ringReqHead) }

// MediatorReqFree is how many requests fit behind tail (the mediator's own
// count of requests published) with the proxy's head at head. A head that
// is not within the last capacity requests reads as a full ring: the calls
// wait in their slots.
func (rg *Ring) MediatorReqFree(tail, head uint64) int {
	used := tail - head
	if used > uint64(rg.l.ReqCap) {
		return 0
	}
	return int(uint64(rg.l.ReqCap) - used)
}

// MediatorPutRequest writes r at position pos (not yet published): its
// head, and its arguments only where it has any.
func (rg *Ring) MediatorPutRequest(pos uint64, r *Request) {
	i := pos & rg.reqMask
	if i&(headsPerLine-1) == 0 {
		// Starting a line of heads: ask now for the line putAhead
		// positions on, which the proxy's core read last. Without it the
		// first store to each line waited for its ownership, ~25 ns a
		// call on the H100 host.
		rg.r.PrefetchW(RingHdrSize + ((pos+putAhead)&rg.reqMask)*reqHeadSize)
	}
	h := rg.r.Bytes(RingHdrSize+i*reqHeadSize, reqHeadSize)
	le.PutUint32(h[0:], r.Slot)
	le.PutUint32(h[4:], r.Seq)
	le.PutUint16(h[8:], r.Number)
	h[10], h[11] = r.Flags, r.Context
	var more uint32
	a := &r.Args // its words one by one (abi.CopyArgs says why)
	if r.Aux|a[0]|a[1]|a[2]|a[3]|a[4]|a[5] != 0 {
		more = 1
		b := rg.r.Bytes(rg.argsOff+i*reqArgsSize, reqArgsSize)
		for k, v := range a {
			le.PutUint64(b[8*k:], v)
		}
		le.PutUint64(b[48:], r.Aux)
	}
	le.PutUint32(h[12:], more)
}

// MediatorPublish makes the requests before tail visible to the proxy, and
// reports whether the proxy sleeps and must be kicked (it swaps the proxy's
// idle word to 0: one kick per sleep).
func (rg *Ring) MediatorPublish(tail uint64) (kick bool) {
	rg.r.Store64(ringReqTail, tail)
	return rg.r.Load32(ringProxyIdl) != 0 && rg.r.CompareAndSwap32(ringProxyIdl, 1, 0)
}

// MediatorNextResult returns the result at the consumer's head, if the
// proxy published it; the caller advances head, and frees the records
// before it with MediatorConsumed.
func (rg *Ring) MediatorNextResult(head uint64) (Result, bool) {
	off := rg.resOff + (head&rg.resMask)*ResultStride
	if rg.r.Load64(off) != head+1 {
		return Result{}, false
	}
	w1, w2, w3 := rg.r.Load64(off+8), rg.r.Load64(off+16), rg.r.Load64(off+24)
	if d := Delivery(w3 >> 32); d == Bulk {
		return Result{Pos: w1, Mask: w2, Delivery: d}, true
	}
	return Result{
		Slot: uint32(w1), Seq: uint32(w1 >> 32), Ret: int64(w2),
		Errno: abi.Errno(uint32(w3)), Delivery: Delivery(w3 >> 32),
	}, true
}

// MediatorConsumed gives the result records before head back to the
// proxy's producers.
func (rg *Ring) MediatorConsumed(head uint64) { rg.r.Store64(ringResHead, head) }

// MediatorIdle announces whether a mediator thread watches the results.
func (rg *Ring) MediatorIdle(idle bool) { rg.r.Store32(ringMedIdle, flag(idle)) }

// flag is an idle word's value.
func flag(idle bool) uint32 {
	if idle {
		return 1
	}
	return 0
}

// ResultCap is the result ring's capacity.
func (rg *Ring) ResultCap() int { return int(rg.resCap) }

// --- The proxy's side. The mediator's words are trusted, but still bounded. ---

// ProxyRequests appends the requests published after head to dst and
// returns the new head; ProxyConsumed then hands the records back.
func (rg *Ring) ProxyRequests(dst []Request, head uint64) ([]Request, uint64, error) {
	tail := rg.r.Load64(ringReqTail)
	n := tail - head
	if n == 0 {
		return dst, head, nil
	}
	if n > uint64(rg.l.ReqCap) {
		return dst, head, fmt.Errorf("%w: request tail %d, head %d", ErrMessage, tail, head)
	}
	dst = slices.Grow(dst, int(n))
	for pos := head; pos != tail; pos++ {
		i := pos & rg.reqMask
		if i&(headsPerLine-1) == 0 {
			// The mediator's core wrote these lines: ask for one a few
			// lines on while this one is read.
			rg.r.Prefetch(RingHdrSize + ((pos+putAhead)&rg.reqMask)*reqHeadSize)
		}
		h := rg.r.Bytes(RingHdrSize+i*reqHeadSize, reqHeadSize)
		// Decoded in place, field by field: a Request built apart and
		// appended is copied in 16-byte moves that wait on the stores that
		// just built it (abi.CopyArgs).
		dst = dst[:len(dst)+1]
		r := &dst[len(dst)-1]
		r.Slot, r.Seq, r.Number, r.Flags, r.Context, r.Pos = le.Uint32(h[0:]), le.Uint32(h[4:]), le.Uint16(h[8:]), h[10], h[11], pos
		if le.Uint32(h[12:]) != 0 {
			a := rg.r.Bytes(rg.argsOff+i*reqArgsSize, reqArgsSize)
			for k := range r.Args {
				r.Args[k] = le.Uint64(a[8*k:])
			}
			r.Aux = le.Uint64(a[48:])
		} else {
			r.Args[0], r.Args[1], r.Args[2], r.Args[3], r.Args[4], r.Args[5], r.Aux = 0, 0, 0, 0, 0, 0, 0
		}
		if i&(headsPerLine-1) == headsPerLine-1 || pos+1 == tail {
			// Done with the line: the mediator writes it next, and
			// finds it in the shared cache instead of in this core's.
			rg.r.Demote(RingHdrSize + i*reqHeadSize)
		}
	}
	return dst, tail, nil
}

// ProxyPending reports whether requests wait after head.
func (rg *Ring) ProxyPending(head uint64) bool { return rg.r.Load64(ringReqTail) != head }

// ProxyConsumed gives the records before head back to the mediator.
func (rg *Ring) ProxyConsumed(head uint64) { rg.r.Store64(ringReqHead, head) }

// ProxyIdle announces whether the proxy sleeps on its socket.
func (rg *Ring) ProxyIdle(idle bool) { rg.r.Store32(ringProxyIdl, flag(idle)) }

// ProxyTryPut writes res at the next free position (tail is the proxy's
// shared reservation counter) and publishes it; false means the ring is
// full (the mediator has not consumed yet).
func (rg *Ring) ProxyTryPut(tail *atomic.Uint64, res Result) bool {
	for {
		pos := tail.Load()
		if pos-rg.r.Load64(ringResHead) >= rg.resCap {
			return false // position pos-capacity is not consumed yet
		}
		if !tail.CompareAndSwap(pos, pos+1) {
			continue // another producer took pos meanwhile
		}
		off := rg.resOff + (pos&rg.resMask)*ResultStride
		w1, w2, w3 := uint64(res.Slot)|uint64(res.Seq)<<32, uint64(res.Ret), uint64(uint32(res.Errno))|uint64(res.Delivery)<<32
		if res.Delivery == Bulk {
			w1, w2, w3 = res.Pos, res.Mask, uint64(Bulk)<<32
		}
		rg.r.Put64(off+8, w1) // published by the mark
		rg.r.Put64(off+16, w2)
		rg.r.Put64(off+24, w3)
		rg.r.Store64(off, pos+1)
		return true
	}
}

// ProxyKickMediator reports whether the mediator sleeps and must be kicked
// (swapping its idle word to 0: one kick per sleep).
func (rg *Ring) ProxyKickMediator() bool {
	return rg.r.Load32(ringMedIdle) != 0 && rg.r.CompareAndSwap32(ringMedIdle, 1, 0)
}
