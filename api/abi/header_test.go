package abi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func testHeader(t testing.TB) Header {
	t.Helper()
	l, err := NewLayout(DefaultLayoutConfig())
	if err != nil {
		t.Fatal(err)
	}
	return Header{
		VersionMajor: VersionMajor,
		VersionMinor: VersionMinor,
		Features:     FeatureSyscalls,
		HostPeerID:   0xfffe,
		Layout:       l,
		Epoch:        0x0102030405060708,
		Heartbeat:    0xf0e0d0c0b0a09080,
		Limits:       DefaultLimits(),
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := testHeader(t)
	b := bytes.Repeat([]byte{0xa5}, PageSize) // EncodeHeader must clear what it does not set
	EncodeHeader(b, h)
	if !bytes.Equal(b[hdrEnd:HeaderSize], make([]byte, HeaderSize-hdrEnd)) {
		t.Error("EncodeHeader left the reserved bytes non-zero")
	}
	if !bytes.Equal(b[HeaderSize:], bytes.Repeat([]byte{0xa5}, PageSize-HeaderSize)) {
		t.Error("EncodeHeader wrote past HeaderSize")
	}
	le := binary.LittleEndian
	for _, f := range []struct {
		name      string
		got, want uint64
	}{
		{"magic", uint64(le.Uint32(b[HdrMagic:])), uint64(Magic)},
		{"heap off", le.Uint64(b[HdrHeapOff:]), h.Layout.HeapOff},
		{"syscall vector", uint64(le.Uint32(b[HdrSyscallVector:])), 4},
		{"control vector", uint64(le.Uint32(b[HdrControlVector:])), 5},
		{"max alloc", le.Uint64(b[HdrMaxAllocSize:]), h.Limits.MaxAllocSize},
	} {
		if f.got != f.want {
			t.Errorf("%s = %#x in the encoding, want %#x", f.name, f.got, f.want)
		}
	}
	got, err := DecodeHeader(b, h.Layout.RegionSize)
	if err != nil {
		t.Fatal(err)
	}
	if got != h {
		t.Errorf("round trip\n got %+v\nwant %+v", got, h)
	}
	if string(b[:4]) != "SLCE" {
		t.Errorf("magic bytes %q", b[:4])
	}
}

// A guest of this version must accept what later minor versions add: new
// minor numbers, feature bits, and fields in the reserved bytes.
func TestDecodeHeaderForwardCompatible(t *testing.T) {
	h := testHeader(t)
	h.VersionMinor = 7
	h.Features = ^uint64(0)
	b := make([]byte, HeaderSize)
	EncodeHeader(b, h)
	for i := hdrEnd; i < HeaderSize; i++ {
		b[i] = byte(i)
	}
	got, err := DecodeHeader(b, h.Layout.RegionSize)
	if err != nil || got != h {
		t.Errorf("DecodeHeader = %+v, %v; want %+v", got, err, h)
	}
}

func TestDecodeHeaderRejects(t *testing.T) {
	h := testHeader(t)
	le := binary.LittleEndian
	for _, tc := range []struct {
		name   string
		region uint64
		mod    func(b []byte)
	}{
		{"bad magic", 0, func(b []byte) { b[HdrMagic] ^= 1 }},
		{"zero page", 0, func(b []byte) { clear(b) }},
		{"major version 0", 0, func(b []byte) { le.PutUint16(b[HdrVersionMajor:], 0) }},
		{"major version 2", 0, func(b []byte) { le.PutUint16(b[HdrVersionMajor:], VersionMajor+1) }},
		{"host peer id too large", 0, func(b []byte) { le.PutUint32(b[HdrHostPeerID:], 0x10000) }},
		{"mapping smaller than header says", h.Layout.RegionSize / 2, func([]byte) {}},
		{"mapping larger than header says", h.Layout.RegionSize * 2, func([]byte) {}},
		{"region size not a power of two", 0, func(b []byte) { le.PutUint64(b[HdrRegionSize:], h.Layout.RegionSize+1) }},
		{"zero channels", 0, func(b []byte) { le.PutUint32(b[HdrChannels:], 0) }},
		{"more channels than the offsets allow", 0, func(b []byte) { le.PutUint32(b[HdrChannels:], 64) }},
		{"ring entries", 0, func(b []byte) { le.PutUint32(b[HdrRingEntries:], 255) }},
		{"syscall slots", 0, func(b []byte) { le.PutUint32(b[HdrSyscallSlots:], 128) }},
		{"channels off", 0, func(b []byte) { le.PutUint64(b[HdrChannelsOff:], 0) }},
		{"rings off", 0, func(b []byte) { le.PutUint64(b[HdrRingsOff:], h.Layout.RingsOff+PageSize) }},
		{"syscall off", 0, func(b []byte) { le.PutUint64(b[HdrSyscallOff:], 1<<63) }},
		{"syscall size", 0, func(b []byte) { le.PutUint64(b[HdrSyscallSize:], 0) }},
		{"heap off", 0, func(b []byte) { le.PutUint64(b[HdrHeapOff:], h.Layout.HeapOff-PageSize) }},
		{"heap size", 0, func(b []byte) { le.PutUint64(b[HdrHeapSize:], h.Layout.RegionSize) }},
		{"syscall vector", 0, func(b []byte) { le.PutUint32(b[HdrSyscallVector:], 5) }},
		{"control vector", 0, func(b []byte) { le.PutUint32(b[HdrControlVector:], 4) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, HeaderSize)
			EncodeHeader(b, h)
			tc.mod(b)
			region := tc.region
			if region == 0 {
				region = h.Layout.RegionSize
			}
			got, err := DecodeHeader(b, region)
			if !errors.Is(err, ErrLayout) {
				t.Fatalf("DecodeHeader = %v, want ErrLayout", err)
			}
			if got != (Header{}) {
				t.Errorf("rejected header is not zero: %+v", got)
			}
		})
	}
	t.Run("short", func(t *testing.T) {
		b := make([]byte, HeaderSize)
		EncodeHeader(b, h)
		for _, n := range []int{0, 1, hdrEnd, HeaderSize - 1} {
			if _, err := DecodeHeader(b[:n], h.Layout.RegionSize); !errors.Is(err, ErrLayout) {
				t.Errorf("DecodeHeader of %d bytes = %v, want ErrLayout", n, err)
			}
		}
	})
}

func TestDefaultLimits(t *testing.T) {
	l := DefaultLimits()
	if l.MaxThrottleNs != 500e6 || l.MaxAllocSize != 16<<30 {
		t.Errorf("DefaultLimits() = %+v", l)
	}
}
