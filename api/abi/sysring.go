package abi

import "encoding/binary"

// The request ring (FeatureSyscallRing).
//
// A GPU thread's call through its slot costs the host two cache lines the
// GPU wrote, found anywhere in the area (the ready map's word, then the
// slot, taken by compare-and-swap). Through the ring the host reads one
// line a call, in order, which the CPU's prefetcher streams: callers claim
// consecutive positions of a ring of SyscallSlots entries (the area's slot
// count) that follows the slots, and write their request there; the slot
// stays the call's result mailbox.
//
// One ring entry (SyscallRingEntrySize bytes, at SyscallRingOff(slots) +
// (pos mod slots) * SyscallRingEntrySize):
//
//	0  u32 tag      pos + 1 (mod 2^32), stored last with release ordering
//	4  u16 number   as in the slot (a call or fastcall number)
//	6  u8  flags    SysFlagBlocking, SysFlagFastcall
//	7  u8  context  the guest context of the call
//	8  u64 args[6]
//	56 u32 slot     the caller's slot: where the result goes
//	60 u32 seq      the slot's sequence number for this call
//
// # The protocol
//
// The caller holds a slot (claimed FREE|s as for a slot call: owned, or
// under the callers' own exclusion) and stores its first 8 bytes as
// PROCESSING|s with bytes 4..7 = number, flags, context (what a slot the
// host took would hold). It then claims a position pos by fetch-and-add on
// the VM's claim counter, writes bytes 4..63 of entry pos mod slots, and
// stores the tag pos+1 with release ordering at system scope. The host
// consumes positions strictly in order from 0: the entry at its head is
// ready when its tag is head+1. It copies the entry out, validates the copy
// and serves it as a call taken from slot|seq: a blocking call's result
// comes as it would for a slot call (FINISHED|s, compare-and-swap from
// PROCESSING|s and bytes 4..7); a non-blocking call's slot is freed
// PROCESSING|s → FREE|s+1 once the entry is copied.
//
// A caller holds its slot until the host has consumed its entry (the result,
// or the free), so at most slots positions are unconsumed at any time and a
// ring of slots entries is never overwritten before it is read: the caller
// of position pos never waits for the host. A caller that must not wait for
// a slot of its own (or has none) uses the slot path.
//
// The claim counter is the VM's, one for every ring caller of the VM, and
// lives where the callers' atomics are cheap: on a GPU, device memory (a
// LAUNCH relocation of kind RelocSyscallRing names it; an atomic on host
// memory would cross PCIe). The host's head starts at 0 when it starts
// serving the area, and a counter the backend makes for the VM starts at the
// head then (0 at first; after a GPU worker's restart, where the host reads). A position claimed and never written (a kernel killed between its
// claim and its tag) would stop the ring: when the head entry is not ready
// for SyscallRingHoleNs while a later one is, the host skips it (counted);
// a call written there afterwards is never served.
const (
	SyscallRingEntrySize = 64

	RingTag     = 0  // u32 pos+1
	RingNumber  = 4  // u16
	RingFlags   = 6  // u8
	RingContext = 7  // u8
	RingArgs    = 8  // u64[SysArgCount]
	RingSlot    = 56 // u32
	RingSeq     = 60 // u32

	// SyscallRingHoleNs is how long the host waits for a claimed position's
	// entry while later ones are ready before it skips it.
	SyscallRingHoleNs = 50_000_000
)

// SyscallRingOff is the offset of the request ring of an area with n slots,
// relative to Layout.SyscallOff.
func SyscallRingOff(n int) uint64 { return SyscallSlotsOff + uint64(n)*SyscallSlotSize }

// RingEntryOff is the offset of position pos's entry in the ring of an area
// with n slots, relative to Layout.SyscallOff.
func RingEntryOff(n int, pos uint64) uint64 {
	return SyscallRingOff(n) + pos%uint64(n)*SyscallRingEntrySize
}

// RingEntry is a decoded copy of one ring entry.
type RingEntry struct {
	Tag  uint32
	Slot uint32
	// Call is the request as a slot would hold it: State PROCESSING, Seq
	// the entry's (the cookie is the slot's own and is not carried).
	Call Slot
}

// DecodeRingEntry decodes an entry copied out of the ring (b holds at least
// SyscallRingEntrySize bytes) of an area with slots slots: DecodeRingWords
// of its little-endian words.
func DecodeRingEntry(b []byte, slots uint32) (RingEntry, Errno) {
	_ = b[SyscallRingEntrySize-1]
	var w [SyscallRingEntrySize / 8]uint64
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	var e RingEntry
	errno := DecodeRingWords(&w, slots, &e)
	return e, errno
}

// DecodeRingWords decodes an entry copied out of the ring as its eight
// words (as the host loads them, with no byte copy) into e. Like DecodeSlot
// it checks what the entry alone can tell: its slot lies in the area and
// its sequence number fits the state word (ErrnoFAULT otherwise: there is no
// slot to answer in), the flags are known (ErrnoINVAL) and the number names
// a call (ErrnoNOSYS). Whether the entry is the one the host waits for (its
// tag) is the caller's check.
func DecodeRingWords(w *[SyscallRingEntrySize / 8]uint64, slots uint32, e *RingEntry) Errno {
	call := uint32(w[0] >> 32)
	e.Tag, e.Slot = uint32(w[0]), uint32(w[7])
	seq := uint32(w[7] >> 32)
	c := &e.Call
	c.State, c.Seq, c.Number, c.Flags, c.Context, c.Cookie = SlotProcessing, seq&SlotSeqMask, uint16(call), uint8(call>>16), uint8(call>>24), 0
	CopyArgs(&c.Args, (*[SysArgCount]uint64)(w[1:7]))
	switch {
	case e.Slot >= slots || seq > SlotSeqMask:
		return ErrnoFAULT
	case c.Flags&^sysFlagsKnown != 0:
		return ErrnoINVAL
	case !c.Fastcall() && LookupCall(c.Number) == nil:
		return ErrnoNOSYS
	}
	return 0
}

// CopyArgs copies a call's arguments word by word. A copy of the array as
// a whole compiles to 16-byte moves, and a 16-byte load of two words that
// were just stored one by one (a decoded copy) cannot take them from the
// store buffer: it waits for both stores to reach the cache, some 15 cycles
// a load, on the syscall poller's path for every call.
func CopyArgs(dst, src *[SysArgCount]uint64) {
	dst[0], dst[1], dst[2], dst[3], dst[4], dst[5] = src[0], src[1], src[2], src[3], src[4], src[5]
}

// EncodeRingEntry writes e into b (SyscallRingEntrySize bytes), tag
// included: what a guest library does, for tests, fuzzers and the sim's
// programs (which store the tag last themselves).
func EncodeRingEntry(b []byte, e RingEntry) {
	_ = b[SyscallRingEntrySize-1]
	le := binary.LittleEndian
	le.PutUint32(b[RingTag:], e.Tag)
	le.PutUint16(b[RingNumber:], e.Call.Number)
	b[RingFlags] = e.Call.Flags
	b[RingContext] = e.Call.Context
	for i, a := range e.Call.Args {
		le.PutUint64(b[RingArgs+8*i:], a)
	}
	le.PutUint32(b[RingSlot:], e.Slot)
	le.PutUint32(b[RingSeq:], e.Call.Seq)
}

// CallWord is bytes 4..7 of a READY or PROCESSING slot holding s: its
// number, flags and context, as a little-endian u32.
func CallWord(s *Slot) uint32 {
	return uint32(s.Number) | uint32(s.Flags)<<16 | uint32(s.Context)<<24
}
