package cuda

import (
	"sync/atomic"
	"unsafe"

	"github.com/sluice-gpu/sluice/api/abi"
)

// The shared block is one memfd per VM, mapped by the mediator and by the
// VM's GPU worker. Everything the three of them exchange per command goes
// through it, without a system call:
//
//	page 0    tail (mediator), head (worker), sleeping (worker): the ring's state;
//	          the VM's memory quota (mediator) and the device memory its
//	          buffers hold (worker); the tracing switch (mediator, tracing.go)
//	ring      ringCap entries of entrySize bytes: commands, mediator → worker:
//	          [0] stamp [8] channel u32 [16] seq [24] the command's record
//	codes     per channel, one 16-byte code slot per command in flight:
//	          [0] code [8] seq, by the worker
//	trace     only with the hop diagnostic (hops.go): per channel, one
//	          32-byte slot per command in flight: [0] when the worker read
//	          it [8] when its launch returned, 0 until then
//	          (CLOCK_MONOTONIC) [16] seq
//	GPU area  per channel: the start and end markers, the last command that
//	          runs on the SMs the worker issued on it; channel 0's block also
//	          the tracer's words
//	          (tracing.go); then one 32-byte record slot per command in
//	          flight, by the GPU:
//	          [0] ran ns [8] first timer read [16] last read [24] seq (THROTTLE's)
//
// Only the GPU area is registered with the GPU (page aligned, at the end):
// the VM's own kernels run in the context it is mapped into, and must not
// reach the ring or the codes. A command's slots are seq % slots.
//
// The worker writes a command's code before it queues anything that writes
// the command's end marker, so the mediator finds the code in place once it
// sees the marker; except a THROTTLE that launched, whose code the worker
// writes right after the launch call returns (the launch goes first), and
// whose end the mediator holds until the code is there (while the worker
// lives: completer.go, sweep). A channel never has more than slots commands in flight
// (Submit refuses more, counting those the deliverer has not taken yet, which
// may read their slots: readThrough), so a slot is not reused before its
// command is delivered, and the ring (slots entries per channel) never overflows.
const (
	offTail     = 0
	offHead     = 64
	offSleeping = 128
	offQuota    = 192 // bytes, 0: none
	offMemUsed  = 256
	offTracing  = 320 // 1: the worker runs the tracer (tracing.go)
	ringOff     = 4096
	// A ring entry is two cache lines, aligned so that a core's
	// adjacent-line prefetch brings the second with the first. The stamp,
	// stored last, is the entry's position in the ring plus one: the
	// worker looks at the stamp of the entry it reads next, not at the
	// tail, so a command reaches it in the entry's lines alone.
	entrySize    = 128
	entryStamp   = 0
	entryChannel = 8
	entrySeq     = 16
	entryRecord  = 24

	codeSize  = 16
	codeValue = 0
	codeStamp = 8

	traceSize   = 32
	traceRead   = 0
	traceLaunch = 8
	traceStamp  = 16

	offStart    = 0
	offEnd      = 8
	offIssued   = 16 // the last command the worker issued on the channel
	offSentRan  = 24 // channel 0's: the tracer's count, ns (tracing.go)
	offSentLive = 32 // channel 0's: the running tracer's number
	offSentDone = 40 // channel 0's: the last tracer's that ended
	offSentOuts = 48 // channel 0's: the switches out the tracers saw
	offSlots    = 64
	slotSize    = 32

	minSlots = 64
)

// blockLayout is the shared block of a VM with channels channels and slots
// commands in flight per channel at most.
type blockLayout struct {
	channels, slots int
	ringCap         uint64 // entries
	codesOff        uintptr
	traceOff        uintptr // 0: no trace area
	gpuOff          uintptr // the GPU area: the channels' blocks, page aligned
	chanStride      uintptr
	size            int
}

// newBlockLayout is the layout of a VM's block; traced gives it the hop
// diagnostic's trace area.
func newBlockLayout(channels, maxInFlight int, traced bool) blockLayout {
	slots := minSlots
	for slots < maxInFlight {
		slots *= 2
	}
	l := blockLayout{channels: channels, slots: slots, ringCap: uint64(channels * slots)}
	l.codesOff = pageUp(ringOff + uintptr(l.ringCap)*entrySize)
	l.gpuOff = pageUp(l.codesOff + uintptr(l.ringCap)*codeSize)
	if traced {
		l.traceOff = l.gpuOff
		l.gpuOff = pageUp(l.traceOff + uintptr(l.ringCap)*traceSize)
	}
	l.chanStride = offSlots + uintptr(slots)*slotSize
	l.size = int(pageUp(l.gpuOff + uintptr(channels)*l.chanStride))
	return l
}

func pageUp(n uintptr) uintptr { return (n + 4095) &^ 4095 }

// slotOff is where command seq's record slot lies in its channel's block.
func (l blockLayout) slotOff(seq uint64) uintptr {
	return offSlots + uintptr(seq%uint64(l.slots))*slotSize
}

// codeOff is where command seq of channel ch leaves its code.
func (l blockLayout) codeOff(ch int, seq uint64) uintptr {
	return l.codesOff + (uintptr(ch)*uintptr(l.slots)+uintptr(seq%uint64(l.slots)))*codeSize
}

// traceSlot is where command seq of channel ch leaves its trace (the layout
// has a trace area).
func (l blockLayout) traceSlot(ch int, seq uint64) uintptr {
	return l.traceOff + (uintptr(ch)*uintptr(l.slots)+uintptr(seq%uint64(l.slots)))*traceSize
}

// block is a mapping of the shared block.
type block struct {
	l    blockLayout
	base unsafe.Pointer
}

func newBlock(l blockLayout, mem []byte) block {
	if len(mem) < l.size {
		panic("cuda: shared block mapping too small")
	}
	return block{l: l, base: unsafe.Pointer(unsafe.SliceData(mem))}
}

func (b block) word(off uintptr) *uint64 { return (*uint64)(unsafe.Add(b.base, off)) }

func (b block) load(off uintptr) uint64     { return atomic.LoadUint64(b.word(off)) }
func (b block) store(off uintptr, v uint64) { atomic.StoreUint64(b.word(off), v) }

// chanBase is channel ch's block's offset (in the GPU area).
func (b block) chanBase(ch int) uintptr { return b.l.gpuOff + uintptr(ch)*b.l.chanStride }

// entryOff is where ring entry i (mod ringCap) lies.
func (b block) entryOff(i uint64) uintptr { return ringOff + uintptr(i%b.l.ringCap)*entrySize }

// entry is ring entry i (mod ringCap).
func (b block) entry(i uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(b.base, b.entryOff(i))), entrySize)
}

// putEntry writes the command at ring position i, its stamp last, and
// then the tail, i+1.
func (b block) putEntry(i uint64, channel int, seq uint64, rec *abi.Record) {
	e := b.entry(i)
	le.PutUint32(e[entryChannel:], uint32(channel))
	le.PutUint32(e[entryChannel+4:], 0)
	le.PutUint64(e[entrySeq:], seq)
	copy(e[entryRecord:], rec[:])
	b.store(b.entryOff(i)+entryStamp, i+1)
	b.store(offTail, i+1)
}

// ready reports whether ring position i holds its command (its stamp).
func (b block) ready(i uint64) bool { return b.load(b.entryOff(i)+entryStamp) == i+1 }

// published is the end of what the ring's writer published: the tail it
// stored and, past it, the entries it stamped but had not stored the tail
// for (it died between the two: putEntry), which the worker takes as any
// other, as it goes by the stamps; a ring of them at most.
func (b block) published() uint64 {
	tail := b.load(offTail)
	for n := uint64(0); n < b.l.ringCap && b.ready(tail); n++ {
		tail++
	}
	return tail
}
