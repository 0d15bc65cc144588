package abi

import (
	"fmt"
	"math/bits"
)

// Version of the ABI this package implements. Minor versions only add
// features (announced in Header.Features); a major change is incompatible.
const (
	VersionMajor = 1
	VersionMinor = 1
)

// Magic identifies a Sluice region: "SLCE" read as a little-endian uint32.
const Magic uint32 = 0x45434c53

// Sizes of the fixed parts of the region.
const (
	PageSize        = 4096
	HeaderSize      = 256 // the Header struct; the rest of the page is reserved
	ChannelDescSize = 128 // two cache lines: guest-owned, host-owned
	RecordSize      = 64  // one command record
	SyscallSlotSize = 64  // one GENESYS slot
)

// Limits on a layout. They keep every index computation in range and the
// per-VM host state bounded.
const (
	MaxChannels     = 64
	MinRingEntries  = 8
	MaxRingEntries  = 1 << 16
	MaxSyscallSlots = 1 << 12
	MinRegionSize   = 64 << 10
	MaxRegionSize   = 1 << 34 // 16 GiB
)

// Doorbell vectors. Vector c (0 <= c < channels) is channel c's doorbell; the
// two after the channels are the syscall area's and the control vector.
// Vectors returns how many a region with n channels uses.
func Vectors(channels int) int { return channels + 2 }

// SyscallVector is the doorbell vector of the syscall area.
func SyscallVector(channels int) int { return channels }

// ControlVector is the doorbell vector of the control area.
func ControlVector(channels int) int { return channels + 1 }

// Layout is the geometry of one region. The host computes it once with
// NewLayout and trusts only its own copy; the guest reads it from the header
// and checks it with Validate.
type Layout struct {
	RegionSize   uint64
	Channels     uint32
	RingEntries  uint32
	SyscallSlots uint32

	ChannelsOff uint64
	RingsOff    uint64
	SyscallOff  uint64
	SyscallSize uint64
	HeapOff     uint64
	HeapSize    uint64
}

// LayoutConfig is what an operator chooses; NewLayout derives the rest.
type LayoutConfig struct {
	RegionSize   uint64 // power of two, MinRegionSize..MaxRegionSize
	Channels     int    // 1..MaxChannels
	RingEntries  int    // power of two, MinRingEntries..MaxRingEntries
	SyscallSlots int    // 0..MaxSyscallSlots, multiple of 64
}

// DefaultLayoutConfig is a 4 MiB region with 4 channels of 256 records and
// 1024 syscall slots (one per GPU thread of a 1024-thread program); the heap
// gets the rest (about 3.8 MiB).
func DefaultLayoutConfig() LayoutConfig {
	return LayoutConfig{RegionSize: 4 << 20, Channels: 4, RingEntries: 256, SyscallSlots: 1024}
}

// NewLayout computes the layout for c, or explains why c is impossible.
func NewLayout(c LayoutConfig) (Layout, error) {
	switch {
	case c.RegionSize < MinRegionSize || c.RegionSize > MaxRegionSize || !isPow2(c.RegionSize):
		return Layout{}, fmt.Errorf("%w: region size %d: must be a power of two in [%d, %d]", ErrLayout, c.RegionSize, MinRegionSize, uint64(MaxRegionSize))
	case c.Channels < 1 || c.Channels > MaxChannels:
		return Layout{}, fmt.Errorf("%w: %d channels: must be in [1, %d]", ErrLayout, c.Channels, MaxChannels)
	case c.RingEntries < MinRingEntries || c.RingEntries > MaxRingEntries || !isPow2(uint64(c.RingEntries)):
		return Layout{}, fmt.Errorf("%w: %d ring entries: must be a power of two in [%d, %d]", ErrLayout, c.RingEntries, MinRingEntries, MaxRingEntries)
	case c.SyscallSlots < 0 || c.SyscallSlots > MaxSyscallSlots || c.SyscallSlots%64 != 0:
		return Layout{}, fmt.Errorf("%w: %d syscall slots: must be a multiple of 64 in [0, %d]", ErrLayout, c.SyscallSlots, MaxSyscallSlots)
	}
	l := Layout{
		RegionSize:   c.RegionSize,
		Channels:     uint32(c.Channels),
		RingEntries:  uint32(c.RingEntries),
		SyscallSlots: uint32(c.SyscallSlots),
	}
	l.ChannelsOff = PageSize
	l.RingsOff = pageAlign(l.ChannelsOff + uint64(c.Channels)*ChannelDescSize)
	l.SyscallOff = pageAlign(l.RingsOff + uint64(c.Channels)*uint64(c.RingEntries)*RecordSize)
	l.SyscallSize = pageAlign(SyscallAreaSize(c.SyscallSlots))
	l.HeapOff = l.SyscallOff + l.SyscallSize
	if l.HeapOff+PageSize > l.RegionSize {
		return Layout{}, fmt.Errorf("%w: channels, rings and syscall slots need %d bytes plus a heap page; region is %d", ErrLayout, l.HeapOff, l.RegionSize)
	}
	l.HeapSize = l.RegionSize - l.HeapOff
	return l, nil
}

// Validate checks a layout read from a header (by a guest, or a fuzzer): it
// must be exactly what NewLayout computes for the same choices.
func (l Layout) Validate() error {
	want, err := NewLayout(LayoutConfig{
		RegionSize:   l.RegionSize,
		Channels:     int(l.Channels),
		RingEntries:  int(l.RingEntries),
		SyscallSlots: int(l.SyscallSlots),
	})
	if err != nil {
		return err
	}
	if want != l {
		return fmt.Errorf("%w: offsets disagree with the geometry (got %+v, want %+v)", ErrLayout, l, want)
	}
	return nil
}

// ChannelOff is the offset of channel c's descriptor.
func (l Layout) ChannelOff(c uint32) uint64 { return l.ChannelsOff + uint64(c)*ChannelDescSize }

// RingOff is the offset of channel c's ring.
func (l Layout) RingOff(c uint32) uint64 {
	return l.RingsOff + uint64(c)*uint64(l.RingEntries)*RecordSize
}

// RecordOff is the offset of the record that the free-running index i names in
// channel c's ring.
func (l Layout) RecordOff(c, i uint32) uint64 {
	return l.RingOff(c) + uint64(i&(l.RingEntries-1))*RecordSize
}

// HeapRange reports whether [off, off+n) lies inside the heap, without
// overflow. A zero-length range at the heap's end is inside.
func (l Layout) HeapRange(off, n uint64) bool {
	return off <= l.HeapSize && n <= l.HeapSize-off
}

// SyscallAreaSize is the size of a syscall area with n slots: the ready map
// (a page of its own), the slots, and the request ring of n entries
// (FeatureSyscallRing, sysring.go).
func SyscallAreaSize(n int) uint64 {
	if n == 0 {
		return 0
	}
	return PageSize + uint64(n)*(SyscallSlotSize+SyscallRingEntrySize)
}

func isPow2(v uint64) bool { return v != 0 && bits.OnesCount64(v) == 1 }

func pageAlign(v uint64) uint64 { return (v + PageSize - 1) &^ (PageSize - 1) }
