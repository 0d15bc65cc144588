package abi

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// The decoders take guest-written bytes: they must never panic, must reject
// with a known code and a zero value, and what they accept must be
// canonical (re-encoding gives back the same bytes).

func FuzzDecodeCommand(f *testing.F) {
	l := testLayout(f)
	for _, c := range validCommands(l.HeapSize) {
		rec := EncodeCommand(c)
		f.Add(rec[:], l.HeapSize, testLimits.MaxThrottleNs, testLimits.MaxAllocSize)
	}
	for _, c := range []Command{
		{},
		{Op: OpNop, Handle: 1},
		{Op: OpCopy, Handle: 1, Dir: CopyHostToDevice, HeapOff: l.HeapSize, Length: 1},
		{Op: OpLaunch, Handle: 1, Grid: [3]uint32{1, 0, 1}, Block: [3]uint32{1, 1, 1}, NameLen: 1},
		{Op: OpThrottle, DurationNs: math.MaxUint64},
	} {
		rec := EncodeCommand(c)
		f.Add(rec[:], l.HeapSize, testLimits.MaxThrottleNs, testLimits.MaxAllocSize)
	}
	f.Add(bytes.Repeat([]byte{0xff}, RecordSize), uint64(math.MaxUint64), uint64(math.MaxUint64), uint64(math.MaxUint64))
	f.Add([]byte{byte(OpFree), 0, 1}, uint64(0), uint64(0), uint64(0)) // short input: the rest is zero

	f.Fuzz(func(t *testing.T, data []byte, heapSize, maxThrottle, maxAlloc uint64) {
		var rec Record
		copy(rec[:], data)
		l := Layout{HeapSize: heapSize}
		lim := Limits{MaxThrottleNs: maxThrottle, MaxAllocSize: maxAlloc}
		c, code := DecodeCommand(&rec, l, lim)
		if code != OK {
			if c != (Command{}) {
				t.Fatalf("rejected (%v) with a non-zero command %+v", code, c)
			}
			if code >= errorCodeCount {
				t.Fatalf("unknown code %d", code)
			}
			return
		}
		if again := EncodeCommand(c); again != rec {
			t.Fatalf("decoding is not canonical: % x decodes to %+v, which encodes to % x", rec, c, again)
		}
		if c2, code2 := DecodeCommand(&rec, l, lim); code2 != OK || c2 != c {
			t.Fatalf("re-decoding gave %+v, %v; want %+v", c2, code2, c)
		}
		checkAccepted(t, c, l, lim)
	})
}

// checkAccepted asserts what every accepted command promises its handler.
func checkAccepted(t *testing.T, c Command, l Layout, lim Limits) {
	t.Helper()
	if !c.Op.Valid() || c.Flags&^validFlags != 0 {
		t.Fatalf("accepted op %d flags %#x", c.Op, c.Flags)
	}
	if opTable[c.Op].handle != validHandle(c.Handle) || (!opTable[c.Op].handle && c.Handle != 0) {
		t.Fatalf("%v accepted with handle %d", c.Op, c.Handle)
	}
	switch c.Op {
	case OpThrottle:
		if c.DurationNs > lim.MaxThrottleNs {
			t.Fatalf("throttle of %d ns accepted, limit %d", c.DurationNs, lim.MaxThrottleNs)
		}
	case OpAlloc:
		if c.Size == 0 || c.Size > lim.MaxAllocSize {
			t.Fatalf("alloc of %d accepted, limit %d", c.Size, lim.MaxAllocSize)
		}
	case OpMemset:
		if c.Value > 0xff || c.Offset+c.Length < c.Offset {
			t.Fatalf("memset %+v accepted", c)
		}
	case OpCopy:
		if c.Offset+c.Length < c.Offset {
			t.Fatalf("copy buffer range wraps: %+v", c)
		}
		if c.Dir != CopyDeviceToDevice && (!l.HeapRange(c.HeapOff, c.Length) || c.HeapOff+c.Length > l.HeapSize) {
			t.Fatalf("copy outside the heap accepted: %+v over %d", c, l.HeapSize)
		}
	case OpLoadModule:
		if c.Length == 0 || c.HeapOff+c.Length > l.HeapSize || c.HeapOff+c.Length < c.HeapOff {
			t.Fatalf("module outside the heap accepted: %+v over %d", c, l.HeapSize)
		}
	case OpLaunch:
		blob := LaunchBlobSize(c.ArgsLen, c.Relocs)
		if c.NameOff+uint64(c.NameLen) > l.HeapSize || c.ArgsOff > l.HeapSize || blob > l.HeapSize-c.ArgsOff {
			t.Fatalf("launch outside the heap accepted: %+v over %d", c, l.HeapSize)
		}
		for i := range 3 {
			if c.Grid[i] == 0 || c.Block[i] == 0 || c.Block[i] > maxBlock {
				t.Fatalf("launch geometry accepted: %+v", c)
			}
		}
	}
}

func FuzzDecodeHeader(f *testing.F) {
	for _, c := range []LayoutConfig{
		DefaultLayoutConfig(),
		{RegionSize: MinRegionSize, Channels: 1, RingEntries: MinRingEntries},
		{RegionSize: MaxRegionSize, Channels: MaxChannels, RingEntries: MaxRingEntries, SyscallSlots: MaxSyscallSlots},
	} {
		l, err := NewLayout(c)
		if err != nil {
			f.Fatal(err)
		}
		b := make([]byte, HeaderSize)
		EncodeHeader(b, Header{VersionMajor: VersionMajor, HostPeerID: 1, Layout: l, Limits: DefaultLimits()})
		f.Add(b, l.RegionSize)
		f.Add(b[:HeaderSize-1], l.RegionSize)
		f.Add(b, l.RegionSize*2)
	}
	f.Add(make([]byte, HeaderSize), uint64(0))

	f.Fuzz(func(t *testing.T, data []byte, regionSize uint64) {
		h, err := DecodeHeader(data, regionSize)
		if err != nil {
			if !errors.Is(err, ErrLayout) || h != (Header{}) {
				t.Fatalf("rejected with %v and %+v", err, h)
			}
			return
		}
		if h.Layout.RegionSize != regionSize || h.VersionMajor != VersionMajor || h.HostPeerID > 0xffff {
			t.Fatalf("accepted %+v for a region of %d", h, regionSize)
		}
		if err := h.Layout.Validate(); err != nil {
			t.Fatalf("accepted a layout that does not validate: %v", err)
		}
		b := make([]byte, HeaderSize)
		EncodeHeader(b, h)
		// Everything before HdrPolling is meaning; HdrPolling is a live
		// word outside Header (EncodeHeader writes it 0), and the rest is
		// reserved for later minor versions, which this decoder ignores.
		if !bytes.Equal(b[:HdrPolling], data[:HdrPolling]) {
			t.Fatalf("decoding is not canonical:\n in % x\nout % x", data[:HdrPolling], b[:HdrPolling])
		}
		if h2, err := DecodeHeader(b, regionSize); err != nil || h2 != h {
			t.Fatalf("round trip: %+v, %v; want %+v", h2, err, h)
		}
	})
}

func FuzzCheckPut(f *testing.F) {
	f.Add(uint32(0), uint32(0), uint32(0), uint32(16))
	f.Add(uint32(16), uint32(0), uint32(0), uint32(16))
	f.Add(uint32(17), uint32(0), uint32(0), uint32(16))
	f.Add(uint32(4), uint32(math.MaxUint32-7), uint32(math.MaxUint32-3), uint32(16))
	f.Add(uint32(2), uint32(0), uint32(3), uint32(16))
	f.Add(uint32(math.MaxUint32), uint32(0), uint32(0), uint32(math.MaxUint32))
	f.Fuzz(func(t *testing.T, put, get, submitted, entries uint32) {
		n, code := CheckPut(put, get, submitted, entries)
		if n > entries {
			t.Fatalf("CheckPut(%d, %d, %d, %d) = %d: more than the ring holds", put, get, submitted, entries, n)
		}
		switch code {
		case OK:
			inFlight := uint64(submitted - get)
			if uint64(n)+inFlight > uint64(entries) {
				t.Fatalf("CheckPut(%d, %d, %d, %d) = %d with %d in flight: more than the ring holds", put, get, submitted, entries, n, inFlight)
			}
			if submitted+n != put {
				t.Fatalf("CheckPut(%d, %d, %d, %d) = %d: does not reach put", put, get, submitted, entries, n)
			}
		case ErrRingOverflow:
			if n != 0 {
				t.Fatalf("overflow with %d new records", n)
			}
		default:
			t.Fatalf("code %v", code)
		}
	})
}

func FuzzLayout(f *testing.F) {
	f.Add(uint64(4<<20), 4, 256, 64)
	f.Add(uint64(MinRegionSize), 13, 64, 0)
	f.Add(uint64(MinRegionSize), 14, 64, 0)
	f.Add(uint64(MaxRegionSize), MaxChannels, MaxRingEntries, MaxSyscallSlots)
	f.Add(uint64(1<<20), 33, 8, 4096)
	f.Add(uint64(math.MaxUint64), -1, -1, -1)
	f.Fuzz(func(t *testing.T, region uint64, channels, entries, slots int) {
		c := LayoutConfig{RegionSize: region, Channels: channels, RingEntries: entries, SyscallSlots: slots}
		l, err := NewLayout(c)
		if err != nil {
			if !errors.Is(err, ErrLayout) || l != (Layout{}) {
				t.Fatalf("NewLayout(%+v) rejected with %v and %+v", c, err, l)
			}
			return
		}
		checkLayoutInvariants(t, c, l)
	})
}
