package sdk_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/sdk/sdktest"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// memTransport is a region with no host behind it.
type memTransport struct{ mem []byte }

func (m *memTransport) Region() []byte             { return m.mem }
func (m *memTransport) Doorbell(uint16, int) error { return nil }
func (m *memTransport) Close() error               { return nil }

func validRegion(t testing.TB) ([]byte, abi.Layout) {
	t.Helper()
	l, err := abi.NewLayout(sdktest.SmallLayout())
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, l.RegionSize)
	abi.EncodeHeader(mem, abi.Header{VersionMajor: abi.VersionMajor, HostPeerID: 3, Layout: l, Epoch: 9, Limits: abi.DefaultLimits()})
	return mem, l
}

func TestOpenHeader(t *testing.T) {
	h, d := sdktest.Open(t, sdktest.Config{Epoch: 42, HostPeerID: 5})
	hdr := d.Header()
	if hdr.Layout != h.Layout() {
		t.Errorf("layout %+v, want %+v", hdr.Layout, h.Layout())
	}
	if d.HostPeer() != 5 || d.Epoch() != 42 {
		t.Errorf("host peer %d epoch %d, want 5 42", d.HostPeer(), d.Epoch())
	}
	if got := len(d.Heap()); uint64(got) != hdr.Layout.HeapSize {
		t.Errorf("heap of %d bytes, want %d", got, hdr.Layout.HeapSize)
	}
}

func TestOpenRejectsBadHeaders(t *testing.T) {
	tests := []struct {
		name   string
		mangle func(mem []byte) []byte
	}{
		{"empty", func([]byte) []byte { return nil }},
		{"short", func(m []byte) []byte { return m[:abi.HeaderSize-1] }},
		{"bad magic", func(m []byte) []byte { m[abi.HdrMagic] ^= 1; return m }},
		{"major version", func(m []byte) []byte { m[abi.HdrVersionMajor]++; return m }},
		{"region size", func(m []byte) []byte { return m[:len(m)/2] }},
		{"heap offset", func(m []byte) []byte { m[abi.HdrHeapOff+1]++; return m }},
		{"ring entries", func(m []byte) []byte { m[abi.HdrRingEntries] = 9; return m }},
		{"host peer", func(m []byte) []byte { m[abi.HdrHostPeerID+2] = 1; return m }},
		{"vectors", func(m []byte) []byte { m[abi.HdrControlVector]++; return m }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem, _ := validRegion(t)
			_, err := sdk.Open(&memTransport{mem: tt.mangle(mem)})
			if !errors.Is(err, sdk.ErrHeader) {
				t.Fatalf("Open: %v, want ErrHeader", err)
			}
		})
	}
	mem, _ := validRegion(t)
	if _, err := sdk.Open(&memTransport{mem: mem}); err != nil {
		t.Fatalf("unmangled region: %v", err)
	}
}

func TestOpenRejectsBadPoll(t *testing.T) {
	mem, _ := validRegion(t)
	if _, err := sdk.Open(&memTransport{mem: mem}, sdk.WithPoll(sdk.Poll{Spin: -1})); err == nil {
		t.Fatal("negative spin accepted")
	}
}

func TestHeapAccess(t *testing.T) {
	mem, l := validRegion(t)
	d, err := sdk.Open(&memTransport{mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("kernel image")
	end := l.HeapSize - uint64(len(msg))
	if err := d.WriteHeap(end, msg); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem[l.HeapOff+end:l.RegionSize], msg) {
		t.Error("WriteHeap did not land at the heap offset")
	}
	got := make([]byte, len(msg))
	if err := d.ReadHeap(end, got); err != nil || !bytes.Equal(got, msg) {
		t.Errorf("ReadHeap = %q, %v", got, err)
	}
	for _, off := range []uint64{end + 1, l.HeapSize, ^uint64(0)} {
		if err := d.WriteHeap(off, msg); !errors.Is(err, sdk.ErrRange) {
			t.Errorf("WriteHeap at %d: %v, want ErrRange", off, err)
		}
		if err := d.ReadHeap(off, got); !errors.Is(err, sdk.ErrRange) {
			t.Errorf("ReadHeap at %d: %v, want ErrRange", off, err)
		}
	}
}

func TestChannelRange(t *testing.T) {
	mem, l := validRegion(t)
	d, err := sdk.Open(&memTransport{mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{-1, int(l.Channels)} {
		if _, err := d.Channel(i); !errors.Is(err, sdk.ErrRange) {
			t.Errorf("Channel(%d): %v, want ErrRange", i, err)
		}
	}
	a, _ := d.Channel(1)
	b, _ := d.Channel(1)
	if a != b {
		t.Error("Channel(1) twice gave two channels: their put indices would diverge")
	}
	if err := d.Doorbell(abi.Vectors(int(l.Channels))); !errors.Is(err, sdk.ErrRange) {
		t.Errorf("doorbell past the control vector: %v", err)
	}
}

// A channel picks up the put index an earlier user of the region left.
func TestChannelResumesPut(t *testing.T) {
	mem, l := validRegion(t)
	shm.New(mem).Store32(l.ChannelOff(0)+abi.ChPut, 1234)
	d, err := sdk.Open(&memTransport{mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := d.Channel(0)
	if c.Put() != 1234 {
		t.Errorf("put %d, want 1234", c.Put())
	}
}

func FuzzDecodeRegionHeader(f *testing.F) {
	mem, _ := validRegion(f)
	f.Add(mem[:abi.HeaderSize], uint32(len(mem)))
	f.Add([]byte{}, uint32(0))
	f.Add(make([]byte, abi.HeaderSize), uint32(abi.MinRegionSize))
	f.Fuzz(func(t *testing.T, hdr []byte, size uint32) {
		region := make([]byte, max(int(size%(1<<20)), len(hdr)))
		copy(region, hdr)
		h, err := sdk.DecodeRegionHeader(region)
		if err != nil {
			return
		}
		if h.Layout.Validate() != nil || h.Layout.RegionSize != uint64(len(region)) {
			t.Fatalf("accepted an invalid header: %+v", h)
		}
	})
}
