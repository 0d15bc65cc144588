package abi

// The syscall area (reserved in v1: declared here so that the C header and
// later versions agree on it, served only when FeatureSyscalls is set).
//
// It starts at Layout.SyscallOff with a page holding the ready bitmap: bit i
// (bit i%64 of the little-endian uint64 word i/64) is set by the guest when
// slot i becomes READY, so the host finds work without scanning every slot;
// with Layout.SyscallSlots a multiple of 64, each word covers a port of 64
// slots. The slots follow at SyscallSlotsOff, SyscallSlotSize bytes each.
const (
	SyscallBitmapOff = 0        // relative to Layout.SyscallOff
	SyscallSlotsOff  = PageSize // relative to Layout.SyscallOff
)

// Field offsets within one GENESYS syscall slot.
const (
	SysState  = 0  // uint32 state word: SlotState in the low 8 bits, sequence number in the high 24
	SysNumber = 4  // uint32 syscall number (or fastcall number)
	SysArgs   = 8  // uint64[SysArgCount]; the host writes the return value into SysArgs[0]
	SysCookie = 56 // uint64, the guest's own; the host never interprets it

	SysArgCount = 6
)

// Split of the slot state word. The sequence number changes each time a
// slot is reused, so that a stale completion (or a guest racing the host on
// a recycled slot) is recognised instead of being mistaken for the current
// call (the ABA problem).
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
	SlotFinished   SlotState = 4 // the return value is in SysArgs[0]
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
