package abi

import (
	"encoding/binary"
	"fmt"
)

// Header field offsets within the header page. The C header's struct
// sluice_header has the same layout.
const (
	HdrMagic         = 0
	HdrVersionMajor  = 4
	HdrVersionMinor  = 6
	HdrFeatures      = 8
	HdrHostPeerID    = 16
	HdrChannels      = 20
	HdrRingEntries   = 24
	HdrSyscallSlots  = 28
	HdrRegionSize    = 32
	HdrChannelsOff   = 40
	HdrRingsOff      = 48
	HdrSyscallOff    = 56
	HdrSyscallSize   = 64
	HdrHeapOff       = 72
	HdrHeapSize      = 80
	HdrEpoch         = 88
	HdrHeartbeat     = 96
	HdrSyscallVector = 104
	HdrControlVector = 108
	HdrMaxThrottleNs = 112
	HdrMaxAllocSize  = 120
	// HdrPolling (FeaturePolling) is a uint32 on a cache line of its own,
	// outside Header: non-zero while the host busy-polls the channels' put
	// indices (see FeaturePolling). EncodeHeader writes it 0.
	HdrPolling = 128
	hdrEnd     = 132 // the rest up to HeaderSize is reserved, zero
)

// Feature bits announced in Header.Features.
const (
	FeatureSyscalls uint64 = 1 << 0 // the syscall area is served
	// FeatureReadyMap: the host scans the syscall area's ready map (one hint
	// byte per slot, syscall.go) and the state words only now and then;
	// guests should set the hints.
	FeatureReadyMap uint64 = 1 << 1
	// FeatureResultWord: a FINISHED slot holds its errno at SysFinErrno too,
	// stored with the state word (syscall.go).
	FeatureResultWord uint64 = 1 << 2
	// FeatureSyscallRing: the host consumes the syscall area's request ring
	// (sysring.go), which follows the slots.
	FeatureSyscallRing uint64 = 1 << 3
	// FeatureWake: the host honours the channels' wake words (ChWake,
	// channel.go): it signals a sleeping guest's eventfd for the channel's
	// vector when the record it waits for completes or the channel fails.
	FeatureWake uint64 = 1 << 4
	// FeaturePolling: the host keeps HdrPolling non-zero while it
	// busy-polls every channel's put, so a guest may leave out the
	// doorbell after a submission that finds it set, as virtio's
	// VRING_USED_F_NO_NOTIFY lets a driver. The guest stores put and then
	// loads HdrPolling, both sequentially consistent; the host, when it
	// stops polling, stores 0 and then loads every put once more, also
	// sequentially consistent: either the guest sees 0 and rings, or the
	// host sees the put. A guest that rings anyway loses nothing but the
	// doorbell's cost; the host never reads the word back.
	FeaturePolling uint64 = 1 << 5
)

// Header is the first part of the region, written by the host when the
// endpoint is created and updated only in Epoch (on mediator restart),
// Heartbeat (periodically) and Limits.MaxThrottleNs (when the operator
// changes the VM's longest command).
type Header struct {
	VersionMajor uint16
	VersionMinor uint16
	Features     uint64
	HostPeerID   uint32
	Layout       Layout
	Epoch        uint64
	Heartbeat    uint64
	Limits       Limits
}

// Limits are the bounds the host enforces on commands beyond the layout's.
type Limits struct {
	// MaxThrottleNs is the longest THROTTLE accepted (longer: ErrTooLong).
	// It is the VM's longest command: a command of any kind that runs on
	// the GPU longer than this (a kernel that does not end, say) fails with
	// ErrTimedOut.
	MaxThrottleNs uint64
	MaxAllocSize  uint64 // largest single ALLOC accepted
}

// DefaultLimits: half-second commands (sluiced --max-command's default),
// 16 GiB buffers.
func DefaultLimits() Limits { return Limits{MaxThrottleNs: 500e6, MaxAllocSize: 16 << 30} }

// EncodeHeader writes h into b, which must hold HeaderSize bytes.
func EncodeHeader(b []byte, h Header) {
	_ = b[HeaderSize-1]
	clear(b[:HeaderSize])
	le := binary.LittleEndian
	le.PutUint32(b[HdrMagic:], Magic)
	le.PutUint16(b[HdrVersionMajor:], h.VersionMajor)
	le.PutUint16(b[HdrVersionMinor:], h.VersionMinor)
	le.PutUint64(b[HdrFeatures:], h.Features)
	le.PutUint32(b[HdrHostPeerID:], h.HostPeerID)
	l := h.Layout
	le.PutUint32(b[HdrChannels:], l.Channels)
	le.PutUint32(b[HdrRingEntries:], l.RingEntries)
	le.PutUint32(b[HdrSyscallSlots:], l.SyscallSlots)
	le.PutUint64(b[HdrRegionSize:], l.RegionSize)
	le.PutUint64(b[HdrChannelsOff:], l.ChannelsOff)
	le.PutUint64(b[HdrRingsOff:], l.RingsOff)
	le.PutUint64(b[HdrSyscallOff:], l.SyscallOff)
	le.PutUint64(b[HdrSyscallSize:], l.SyscallSize)
	le.PutUint64(b[HdrHeapOff:], l.HeapOff)
	le.PutUint64(b[HdrHeapSize:], l.HeapSize)
	le.PutUint64(b[HdrEpoch:], h.Epoch)
	le.PutUint64(b[HdrHeartbeat:], h.Heartbeat)
	le.PutUint32(b[HdrSyscallVector:], uint32(SyscallVector(int(l.Channels))))
	le.PutUint32(b[HdrControlVector:], uint32(ControlVector(int(l.Channels))))
	le.PutUint64(b[HdrMaxThrottleNs:], h.Limits.MaxThrottleNs)
	le.PutUint64(b[HdrMaxAllocSize:], h.Limits.MaxAllocSize)
}

// DecodeHeader decodes and checks a header copied out of a region of
// regionSize bytes. It is what a guest runs before trusting any offset.
func DecodeHeader(b []byte, regionSize uint64) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: header needs %d bytes, have %d", ErrLayout, HeaderSize, len(b))
	}
	le := binary.LittleEndian
	if m := le.Uint32(b[HdrMagic:]); m != Magic {
		return Header{}, fmt.Errorf("%w: bad magic %#x", ErrLayout, m)
	}
	h := Header{
		VersionMajor: le.Uint16(b[HdrVersionMajor:]),
		VersionMinor: le.Uint16(b[HdrVersionMinor:]),
		Features:     le.Uint64(b[HdrFeatures:]),
		HostPeerID:   le.Uint32(b[HdrHostPeerID:]),
		Layout: Layout{
			Channels:     le.Uint32(b[HdrChannels:]),
			RingEntries:  le.Uint32(b[HdrRingEntries:]),
			SyscallSlots: le.Uint32(b[HdrSyscallSlots:]),
			RegionSize:   le.Uint64(b[HdrRegionSize:]),
			ChannelsOff:  le.Uint64(b[HdrChannelsOff:]),
			RingsOff:     le.Uint64(b[HdrRingsOff:]),
			SyscallOff:   le.Uint64(b[HdrSyscallOff:]),
			SyscallSize:  le.Uint64(b[HdrSyscallSize:]),
			HeapOff:      le.Uint64(b[HdrHeapOff:]),
			HeapSize:     le.Uint64(b[HdrHeapSize:]),
		},
		Epoch:     le.Uint64(b[HdrEpoch:]),
		Heartbeat: le.Uint64(b[HdrHeartbeat:]),
		Limits: Limits{
			MaxThrottleNs: le.Uint64(b[HdrMaxThrottleNs:]),
			MaxAllocSize:  le.Uint64(b[HdrMaxAllocSize:]),
		},
	}
	if h.VersionMajor != VersionMajor {
		return Header{}, fmt.Errorf("%w: ABI major version %d, this side speaks %d", ErrLayout, h.VersionMajor, VersionMajor)
	}
	if h.HostPeerID > 0xffff {
		return Header{}, fmt.Errorf("%w: host peer id %d out of range", ErrLayout, h.HostPeerID)
	}
	if h.Layout.RegionSize != regionSize {
		return Header{}, fmt.Errorf("%w: header says region of %d bytes, mapping has %d", ErrLayout, h.Layout.RegionSize, regionSize)
	}
	if err := h.Layout.Validate(); err != nil {
		return Header{}, err
	}
	ch := int(h.Layout.Channels)
	if sv, cv := le.Uint32(b[HdrSyscallVector:]), le.Uint32(b[HdrControlVector:]); sv != uint32(SyscallVector(ch)) || cv != uint32(ControlVector(ch)) {
		return Header{}, fmt.Errorf("%w: doorbell vectors %d/%d disagree with %d channels", ErrLayout, sv, cv, ch)
	}
	return h, nil
}
