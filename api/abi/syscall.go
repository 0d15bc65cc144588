package abi

import (
	"encoding/binary"
	"fmt"
)

// The syscall area (ABI 1.1, announced by FeatureSyscalls).
//
// It starts at Layout.SyscallOff with a page holding the ready map, then
// Layout.SyscallSlots slots of SyscallSlotSize bytes at SyscallSlotsOff.
//
// # The ready map (FeatureReadyMap)
//
// Byte i of the page at SyscallReadyMapOff is slot i's ready hint (1024
// slots: 16 cache lines, against 1024 for the state words). A guest sets it
// to any nonzero value with a plain store after it stored READY (a GPU
// cannot always make an atomic read-modify-write on host memory over PCIe,
// and a byte store needs none). The host scans the map, and for each set
// byte clears it BEFORE it reads the slot's state word, so that a hint set
// by a later publish of the slot is never lost; when the state is not READY
// yet but POPULATING (a GPU's hint store may land before its READY store),
// it sets the byte again and looks at the next pass. Hints are only hints:
// the host still reads the state word and acts on it alone, and it also
// sweeps every state word now and then (the mediator: a sweep every
// 200 µs, 32 slots a pass, and a whole one at each wakeup from idle), so
// that a guest that sets no hints (a guest library older than
// FeatureReadyMap, a hostile one) is still served, only later; a hint on a
// slot that is not READY costs the host one state read. Before
// FeatureReadyMap the page held a bitmap (bit i of the little-endian uint64
// word i/64) that no host read: a guest that still sets bits there sets
// hint bytes 0..511, which is harmless.
//
// # One slot
//
//	0  u32 state    SlotState in the low 8 bits, sequence number in the high 24
//	4  u16 number   call number (Sys*), or a fastcall number with SysFlagFastcall
//	6  u8  flags    SysFlagBlocking, SysFlagFastcall
//	7  u8  context  the guest context the call runs in (0: the VM's default)
//	8  u64 args[6]  arguments; the host writes the result into args[0] (return
//	                value, int64) and args[1] (errno, 0 on success)
//	56 u64 cookie   the guest's own; the host never interprets it
//
// ABI 1.0 reserved offset 4 as a u32 call number; 1.1 splits it so that the
// blocking flag and the context fit in the 64 bytes without a second cache
// line (a GPU thread writes one line and rings).
//
// # The protocol
//
// A slot belongs to the guest while FREE. The caller moves it FREE|s →
// POPULATING|s (callers that share a slot must exclude each other: CPU
// callers by compare-and-swap on the state word; GPU callers, whose
// compare-and-swap on host memory over PCIe is not atomic against the host
// and can write back a stale READY, by a lock in the cookie's low 32 bits,
// which the host never writes: include/sluice_syscall.h), writes number,
// flags, context and arguments, and publishes
// READY|s with release ordering (on a GPU: a system-scope fence before the
// store). The host copies the slot out, validates the copy and moves it
// READY|s → PROCESSING|s by compare-and-swap (a guest that rewrote the slot
// in between makes the swap fail and the call is not taken). Nothing the guest
// writes afterwards reaches the call: the host acts on its copy.
//
//   - Blocking calls: when the call ends the host writes args[0] and args[1]
//     and then FINISHED|s with the errno at SysFinErrno, by an 8-byte
//     compare-and-swap from PROCESSING|s and the bytes 4..7 the copy held (a
//     guest that scribbled on them loses its result). The caller reads the
//     result and frees the slot with FREE|s+1.
//   - Non-blocking calls (no SysFlagBlocking): the host frees the slot right
//     after the copy, READY|s → FREE|s+1; the result is discarded (counted
//     in the host's statistics).
//
// The sequence number changes each time a slot is reused, so a stale
// completion (or a guest racing the host on a recycled slot) is recognised
// instead of being mistaken for the current call (the ABA problem).
const (
	SyscallBitmapOff   = 0        // relative to Layout.SyscallOff: the page before the slots (ABI 1.1 before FeatureReadyMap: a bitmap no host read)
	SyscallReadyMapOff = 0        // relative to Layout.SyscallOff: one hint byte per slot (FeatureReadyMap)
	SyscallSlotsOff    = PageSize // relative to Layout.SyscallOff
)

// ReadyMapOff is the offset of slot i's ready hint byte relative to
// Layout.SyscallOff.
func ReadyMapOff(i uint32) uint64 { return SyscallReadyMapOff + uint64(i) }

// Field offsets within one GENESYS syscall slot.
const (
	SysState    = 0  // uint32 state word
	SysNumber   = 4  // uint16 call number
	SysFlags    = 6  // uint8 SysFlag*
	SysContext  = 7  // uint8 context id
	SysArgs     = 8  // uint64[SysArgCount]
	SysRet      = 8  // int64 return value (args[0]), written by the host
	SysErrno    = 16 // uint64 errno (args[1]), written by the host
	SysFinErrno = 4  // uint32 errno in a FINISHED slot (FeatureResultWord), stored with the state word
	SysCookie   = 56 // uint64, the guest's own

	SysArgCount = 6
)

// Slot flags.
const (
	SysFlagBlocking uint8 = 1 << 0 // the caller waits for FINISHED and the result
	SysFlagFastcall uint8 = 1 << 1 // number is a fastcall number (RegisterFastcall)
	sysFlagsKnown         = SysFlagBlocking | SysFlagFastcall
)

// MaxContexts bounds the guest contexts of one VM (context ids 1..255;
// 0 is the default context every VM has).
const MaxContexts = 255

// Split of the slot state word.
const (
	SlotStateBits = 8
	SlotStateMask = 1<<SlotStateBits - 1
	SlotSeqShift  = SlotStateBits
	SlotSeqMask   = 1<<(32-SlotStateBits) - 1 // after shifting right by SlotSeqShift
)

// SlotState is the low byte of a syscall slot's state word.
type SlotState uint8

// Slot states, in the order a slot goes through them:
// FREE → POPULATING → READY → PROCESSING → FINISHED → FREE.
const (
	SlotFree       SlotState = 0 // owned by the guest, unused
	SlotPopulating SlotState = 1 // the guest is writing the arguments
	SlotReady      SlotState = 2 // arguments complete; the host may take it
	SlotProcessing SlotState = 3 // the host has copied it out and is serving it
	SlotFinished   SlotState = 4 // the result is in args[0] (value) and args[1] (errno)
	slotStateCount           = 5
)

var slotStateNames = [slotStateCount]string{"free", "populating", "ready", "processing", "finished"}

func (s SlotState) String() string {
	if int(s) < len(slotStateNames) {
		return slotStateNames[s]
	}
	return "unknown"
}

// SlotWord packs a state and a sequence number (truncated to 24 bits) into a
// state word.
func SlotWord(s SlotState, seq uint32) uint32 {
	return (seq&SlotSeqMask)<<SlotSeqShift | uint32(s)
}

// SplitSlotWord is SlotWord's inverse.
func SplitSlotWord(w uint32) (SlotState, uint32) {
	return SlotState(w & SlotStateMask), w >> SlotSeqShift
}

// NextSeq is the sequence number that follows seq (24 bits, wrapping).
func NextSeq(seq uint32) uint32 { return (seq + 1) & SlotSeqMask }

// SlotOff is the offset of slot i relative to Layout.SyscallOff.
func SlotOff(i uint32) uint64 { return SyscallSlotsOff + uint64(i)*SyscallSlotSize }

// Slot is a decoded copy of one syscall slot.
type Slot struct {
	State   SlotState
	Seq     uint32
	Number  uint16
	Flags   uint8
	Context uint8
	Args    [SysArgCount]uint64
	Cookie  uint64
}

// Blocking reports whether the caller waits for the result.
func (s *Slot) Blocking() bool { return s.Flags&SysFlagBlocking != 0 }

// Fastcall reports whether Number is a fastcall number.
func (s *Slot) Fastcall() bool { return s.Flags&SysFlagFastcall != 0 }

// DecodeSlot decodes a slot copied out of the region (b holds at least
// SyscallSlotSize bytes). It checks what the slot alone can tell: the state,
// the flags, and that a call number names a known call (ErrnoNOSYS
// otherwise); the arguments are the call's business (the proxy checks them
// against the heap). A slot that is not READY is ErrSlotState.
func DecodeSlot(b []byte) (Slot, Errno) {
	_ = b[SyscallSlotSize-1]
	le := binary.LittleEndian
	var s Slot
	s.State, s.Seq = SplitSlotWord(le.Uint32(b[SysState:]))
	s.Number = le.Uint16(b[SysNumber:])
	s.Flags = b[SysFlags]
	s.Context = b[SysContext]
	for i := range s.Args {
		s.Args[i] = le.Uint64(b[SysArgs+8*i:])
	}
	s.Cookie = le.Uint64(b[SysCookie:])
	switch {
	case s.State != SlotReady:
		return s, ErrnoAGAIN
	case s.Flags&^sysFlagsKnown != 0:
		return s, ErrnoINVAL
	case !s.Fastcall() && LookupCall(s.Number) == nil:
		return s, ErrnoNOSYS
	}
	return s, 0
}

// EncodeSlot writes s into b (SyscallSlotSize bytes), state word included:
// what a guest library does, for tests, fuzzers and the CPU-side SDK (which
// stores the state word last itself).
func EncodeSlot(b []byte, s Slot) {
	_ = b[SyscallSlotSize-1]
	le := binary.LittleEndian
	le.PutUint32(b[SysState:], SlotWord(s.State, s.Seq))
	le.PutUint16(b[SysNumber:], s.Number)
	b[SysFlags] = s.Flags
	b[SysContext] = s.Context
	for i, a := range s.Args {
		le.PutUint64(b[SysArgs+8*i:], a)
	}
	le.PutUint64(b[SysCookie:], s.Cookie)
}

func (s Slot) String() string {
	return fmt.Sprintf("slot{%v seq=%d nr=%d flags=%#x ctx=%d}", s.State, s.Seq, s.Number, s.Flags, s.Context)
}
