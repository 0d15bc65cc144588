package abi

// Channel descriptor field offsets, relative to Layout.ChannelOff(c). The
// first cache line belongs to the guest, the second to the host: neither side
// ever writes the other's line, so they never contend for it.
const (
	// Guest-owned.
	ChPut   = 0 // uint32, free-running index of the next record the guest will write
	ChReset = 4 // uint32, the guest bumps it to ask the host to clear a channel error

	// Host-owned.
	ChGet        = 64 // uint32, free-running index of the next record to complete
	ChError      = 68 // uint32 ErrorCode of the first failed record, 0 if none
	ChErrorIndex = 72 // uint32, free-running index of that record
	ChResetAck   = 76 // uint32, the last ChReset value the host acted on
	ChFence      = 80 // uint64, value of the last FENCE completed
	ChCompleted  = 88 // uint64, records completed since the channel was created
	ChState      = 96 // uint32 ChannelState
)

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
