package abi

// Channel descriptor field offsets, relative to Layout.ChannelOff(c). The
// first cache line belongs to the guest, the second to the host: neither side
// ever writes the other's line, so they never contend for it (one exception:
// the host clears WakeArmed in ChWake when it signals a sleeping guest).
const (
	// Guest-owned.
	ChPut   = 0 // uint32, free-running index of the next record the guest will write
	ChReset = 4 // uint32, the guest bumps it to ask the host to clear a channel error
	ChWake  = 8 // uint64 wake word (FeatureWake): 0, or WakeWord(peer, index) while the guest sleeps

	// Host-owned.
	ChGet        = 64 // uint32, free-running index of the next record to complete
	ChError      = 68 // uint32 ErrorCode of the first failed record, 0 if none
	ChErrorIndex = 72 // uint32, free-running index of that record
	ChResetAck   = 76 // uint32, the last ChReset value the host acted on
	ChFence      = 80 // uint64, value of the last FENCE completed
	ChCompleted  = 88 // uint64, records completed since the channel was created
	ChState      = 96 // uint32 ChannelState
)

// The wake word (FeatureWake) lets a guest sleep on its own ivshmem
// eventfd for the channel's vector instead of polling get, the way virtio's
// event index avoids needless interrupts: a guest that polls leaves the
// word 0 and the host never signals it. A guest about to sleep stores
// WakeWord(its peer id, index) with a sequentially consistent store, looks
// at get (and the error) once more, and only then blocks; after every
// publication of its line (get, error) the host loads the word (also
// sequentially consistent) and, when WakeDue, clears WakeArmed with a
// compare-and-swap and signals vector c of that peer: one signal per sleep.
// The host's store of get and the guest's store of the word cannot both be
// missed by the other side's later load, so no wakeup is lost. A guest that
// wakes (signalled or not) stores 0 before it looks again. Bits 16..30 are
// zero.
const (
	WakeArmed      uint64 = 1 << 31 // the guest sleeps: signal it
	WakePeerMask   uint64 = 0xffff  // the ivshmem peer id to signal
	WakeIndexShift        = 32      // the upper half: the record index the guest waits for
)

// WakeWord is the wake word of a guest, ivshmem peer peer, that sleeps
// until the record with free-running index index completes.
func WakeWord(peer uint16, index uint32) uint64 {
	return uint64(index)<<WakeIndexShift | WakeArmed | uint64(peer)
}

// WakeDue says whether the host, having just published get (and failed:
// the channel's error is set), must signal the guest that stored the wake
// word w, and which peer: when w is armed and get has passed its index, or
// the channel failed. A guest waiting for any progress names the index
// before the get it saw last.
func WakeDue(w uint64, get uint32, failed bool) (peer uint16, due bool) {
	if w&WakeArmed == 0 {
		return 0, false
	}
	return uint16(w & WakePeerMask), failed || int32(get-uint32(w>>WakeIndexShift)) > 0
}

// ChannelState is the host's view of a channel, published for the guest.
type ChannelState uint32

// Channel states.
const (
	ChannelIdle   ChannelState = 0 // nothing in flight
	ChannelBusy   ChannelState = 1 // commands forwarded to the GPU
	ChannelHeld   ChannelState = 2 // doorbells latched by the scheduler
	ChannelFailed ChannelState = 3 // stopped at ChError until the guest resets it
	channelStateN              = 4
)

var channelStateNames = [channelStateN]string{"idle", "busy", "held", "failed"}

func (s ChannelState) String() string {
	if int(s) < len(channelStateNames) {
		return channelStateNames[s]
	}
	return "unknown"
}

// CheckPut validates a put index read from a channel descriptor against the
// host's own get (records completed) and submitted (records already
// forwarded) indices. All three are free-running uint32 counters. It returns
// how many new records lie between submitted and put, or ErrRingOverflow if
// put is behind submitted or more than entries ahead of get.
func CheckPut(put, get, submitted, entries uint32) (uint32, ErrorCode) {
	ahead := put - get // wraps correctly for free-running counters
	inFlight := submitted - get
	if ahead > entries || ahead < inFlight {
		return 0, ErrRingOverflow
	}
	return ahead - inFlight, OK
}
