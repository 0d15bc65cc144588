package abi

import (
	"errors"
	"math"
	"testing"
)

// checkLayoutInvariants asserts what every layout NewLayout accepts must
// satisfy, whatever the configuration.
func checkLayoutInvariants(t *testing.T, c LayoutConfig, l Layout) {
	t.Helper()
	if !isPow2(l.RegionSize) || l.RegionSize != c.RegionSize {
		t.Errorf("region size %d, config %d", l.RegionSize, c.RegionSize)
	}
	if int(l.Channels) != c.Channels || int(l.RingEntries) != c.RingEntries || int(l.SyscallSlots) != c.SyscallSlots {
		t.Errorf("geometry %d/%d/%d, config %+v", l.Channels, l.RingEntries, l.SyscallSlots, c)
	}
	parts := []struct {
		name     string
		off, len uint64
	}{
		{"header", 0, PageSize},
		{"channels", l.ChannelsOff, uint64(l.Channels) * ChannelDescSize},
		{"rings", l.RingsOff, uint64(l.Channels) * uint64(l.RingEntries) * RecordSize},
		{"syscall", l.SyscallOff, l.SyscallSize},
		{"heap", l.HeapOff, l.HeapSize},
	}
	end := uint64(0)
	for _, p := range parts {
		if p.off%PageSize != 0 {
			t.Errorf("%s at %#x: not page aligned", p.name, p.off)
		}
		if p.off < end {
			t.Errorf("%s at %#x overlaps the previous part, which ends at %#x", p.name, p.off, end)
		}
		if p.off > l.RegionSize || p.len > l.RegionSize-p.off {
			t.Errorf("%s [%#x, +%#x) outside the region of %#x", p.name, p.off, p.len, l.RegionSize)
		}
		end = p.off + p.len
	}
	if l.SyscallSize < SyscallAreaSize(c.SyscallSlots) {
		t.Errorf("syscall area %d bytes, %d slots need %d", l.SyscallSize, c.SyscallSlots, SyscallAreaSize(c.SyscallSlots))
	}
	if l.HeapSize < PageSize || l.HeapSize%PageSize != 0 {
		t.Errorf("heap of %d bytes", l.HeapSize)
	}
	if l.HeapOff+l.HeapSize != l.RegionSize {
		t.Errorf("heap ends at %#x, region at %#x: the heap must get the rest", l.HeapOff+l.HeapSize, l.RegionSize)
	}
	last := l.RecordOff(l.Channels-1, l.RingEntries-1)
	if last+RecordSize > l.SyscallOff || last < l.RingsOff {
		t.Errorf("last record at %#x outside the rings [%#x, %#x)", last, l.RingsOff, l.SyscallOff)
	}
	if d := l.ChannelOff(l.Channels-1) + ChannelDescSize; d > l.RingsOff {
		t.Errorf("last channel descriptor ends at %#x, after the rings start at %#x", d, l.RingsOff)
	}
	if err := l.Validate(); err != nil {
		t.Errorf("Validate of NewLayout's own layout: %v", err)
	}
}

func TestNewLayoutDefault(t *testing.T) {
	c := DefaultLayoutConfig()
	l, err := NewLayout(c)
	if err != nil {
		t.Fatal(err)
	}
	checkLayoutInvariants(t, c, l)
	want := Layout{
		RegionSize: 4 << 20, Channels: 4, RingEntries: 256, SyscallSlots: 1024,
		ChannelsOff: PageSize,
		RingsOff:    2 * PageSize, // 4 descriptors fit in one page
		SyscallOff:  2*PageSize + 4*256*RecordSize,
		SyscallSize: 33 * PageSize, // ready map page + 1024 slots and 1024 ring entries of 64 bytes
	}
	want.HeapOff = want.SyscallOff + want.SyscallSize
	want.HeapSize = want.RegionSize - want.HeapOff
	if l != want {
		t.Errorf("default layout\n got %+v\nwant %+v", l, want)
	}
	if l.HeapSize < 3<<20 {
		t.Errorf("default heap only %d bytes", l.HeapSize)
	}
}

func TestNewLayoutAccepts(t *testing.T) {
	for _, c := range []LayoutConfig{
		{RegionSize: MinRegionSize, Channels: 1, RingEntries: MinRingEntries},
		{RegionSize: MinRegionSize, Channels: 1, RingEntries: MinRingEntries, SyscallSlots: 64},
		{RegionSize: MaxRegionSize, Channels: MaxChannels, RingEntries: MaxRingEntries, SyscallSlots: MaxSyscallSlots},
		{RegionSize: 1 << 20, Channels: 33, RingEntries: 32, SyscallSlots: 128}, // descriptors span two pages
		{RegionSize: 8 << 20, Channels: 7, RingEntries: 1024, SyscallSlots: 0},
		{RegionSize: MinRegionSize, Channels: 3, RingEntries: 256},
	} {
		l, err := NewLayout(c)
		if err != nil {
			t.Errorf("NewLayout(%+v): %v", c, err)
			continue
		}
		checkLayoutInvariants(t, c, l)
	}
}

func TestNewLayoutTightFit(t *testing.T) {
	// 64 KiB is 16 pages: header, channel descriptors, then 13 pages of
	// rings leave exactly one heap page; 14 pages of rings leave none.
	fits := LayoutConfig{RegionSize: MinRegionSize, Channels: 13, RingEntries: 64} // 13*64*64 bytes = 13 pages
	l, err := NewLayout(fits)
	if err != nil {
		t.Fatalf("NewLayout(%+v): %v", fits, err)
	}
	checkLayoutInvariants(t, fits, l)
	if l.HeapSize != PageSize {
		t.Errorf("heap %d bytes, want exactly one page", l.HeapSize)
	}
	tooBig := LayoutConfig{RegionSize: MinRegionSize, Channels: 14, RingEntries: 64}
	if _, err := NewLayout(tooBig); !errors.Is(err, ErrLayout) {
		t.Errorf("NewLayout(%+v) = %v, want ErrLayout", tooBig, err)
	}
	// The syscall area counts too: 64 slots take the ready map page, one
	// page of slots and one of ring entries.
	withSys := LayoutConfig{RegionSize: MinRegionSize, Channels: 10, RingEntries: 64, SyscallSlots: 64}
	l, err = NewLayout(withSys)
	if err != nil || l.HeapSize != PageSize {
		t.Errorf("NewLayout(%+v) = heap %d, %v; want one heap page", withSys, l.HeapSize, err)
	}
	withSys.SyscallSlots = 128
	if _, err := NewLayout(withSys); !errors.Is(err, ErrLayout) {
		t.Errorf("NewLayout(%+v) = %v, want ErrLayout", withSys, err)
	}
}

func TestNewLayoutRejects(t *testing.T) {
	ok := DefaultLayoutConfig()
	for _, tc := range []struct {
		name string
		mod  func(*LayoutConfig)
	}{
		{"zero region", func(c *LayoutConfig) { c.RegionSize = 0 }},
		{"region below minimum", func(c *LayoutConfig) { c.RegionSize = MinRegionSize / 2 }},
		{"region above maximum", func(c *LayoutConfig) { c.RegionSize = MaxRegionSize * 2 }},
		{"region not a power of two", func(c *LayoutConfig) { c.RegionSize = 3 << 20 }},
		{"region max uint64", func(c *LayoutConfig) { c.RegionSize = math.MaxUint64 }},
		{"no channels", func(c *LayoutConfig) { c.Channels = 0 }},
		{"negative channels", func(c *LayoutConfig) { c.Channels = -1 }},
		{"too many channels", func(c *LayoutConfig) { c.Channels = MaxChannels + 1 }},
		{"ring too small", func(c *LayoutConfig) { c.RingEntries = MinRingEntries / 2 }},
		{"ring too large", func(c *LayoutConfig) { c.RingEntries = MaxRingEntries * 2 }},
		{"ring not a power of two", func(c *LayoutConfig) { c.RingEntries = 100 }},
		{"ring zero", func(c *LayoutConfig) { c.RingEntries = 0 }},
		{"ring negative", func(c *LayoutConfig) { c.RingEntries = -256 }},
		{"syscall slots negative", func(c *LayoutConfig) { c.SyscallSlots = -64 }},
		{"syscall slots not a multiple of 64", func(c *LayoutConfig) { c.SyscallSlots = 65 }},
		{"syscall slots above maximum", func(c *LayoutConfig) { c.SyscallSlots = MaxSyscallSlots + 64 }},
		{"parts do not fit", func(c *LayoutConfig) { c.Channels, c.RingEntries = MaxChannels, MaxRingEntries }},
		{"no heap page left", func(c *LayoutConfig) {
			c.RegionSize, c.Channels, c.RingEntries, c.SyscallSlots = MinRegionSize, 8, 128, 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			l, err := NewLayout(c)
			if !errors.Is(err, ErrLayout) {
				t.Fatalf("NewLayout(%+v) = %v, want ErrLayout", c, err)
			}
			if l != (Layout{}) {
				t.Errorf("rejected layout is not zero: %+v", l)
			}
		})
	}
}

func TestLayoutValidate(t *testing.T) {
	good, err := NewLayout(DefaultLayoutConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate(default) = %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Layout)
	}{
		{"zero", func(l *Layout) { *l = Layout{} }},
		{"bad region size", func(l *Layout) { l.RegionSize++ }},
		{"bigger region, same offsets", func(l *Layout) { l.RegionSize *= 2 }},
		{"channels", func(l *Layout) { l.Channels = MaxChannels + 1 }},
		{"ring entries", func(l *Layout) { l.RingEntries = 7 }},
		{"ring entries huge", func(l *Layout) { l.RingEntries = math.MaxUint32 }},
		{"syscall slots", func(l *Layout) { l.SyscallSlots = 1 }},
		{"syscall slots huge", func(l *Layout) { l.SyscallSlots = math.MaxUint32 }},
		{"channels off", func(l *Layout) { l.ChannelsOff = 0 }},
		{"rings off", func(l *Layout) { l.RingsOff += PageSize }},
		{"syscall off", func(l *Layout) { l.SyscallOff -= PageSize }},
		{"syscall size", func(l *Layout) { l.SyscallSize = 0 }},
		{"heap off", func(l *Layout) { l.HeapOff += PageSize; l.HeapSize -= PageSize }},
		{"heap size", func(l *Layout) { l.HeapSize = math.MaxUint64 }},
		{"more channels, same offsets", func(l *Layout) { l.Channels = 40 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := good
			tc.mod(&l)
			if err := l.Validate(); !errors.Is(err, ErrLayout) {
				t.Errorf("Validate(%+v) = %v, want ErrLayout", l, err)
			}
		})
	}
}

func TestHeapRange(t *testing.T) {
	l := Layout{HeapSize: 1 << 20}
	const max = math.MaxUint64
	for _, tc := range []struct {
		off, n uint64
		want   bool
	}{
		{0, 0, true},
		{0, 1 << 20, true},
		{1, 1<<20 - 1, true},
		{1 << 20, 0, true}, // empty range at the end
		{1<<20 - 1, 1, true},
		{1 << 20, 1, false},
		{0, 1<<20 + 1, false},
		{1<<20 + 1, 0, false},
		{1, 1 << 20, false},
		{max, 1, false},   // off + n wraps to 0
		{1, max, false},   // off + n wraps to 0
		{max, max, false}, // wraps to max-1
		{max, 0, false},
		{0, max, false},
		{1 << 19, max - 1<<19 + 1, false}, // sum wraps to exactly 0
	} {
		if got := l.HeapRange(tc.off, tc.n); got != tc.want {
			t.Errorf("HeapRange(%#x, %#x) over %#x = %v, want %v", tc.off, tc.n, l.HeapSize, got, tc.want)
		}
	}
	if empty := (Layout{}); !empty.HeapRange(0, 0) || empty.HeapRange(0, 1) {
		t.Error("empty heap: only the empty range at 0 is inside")
	}
}

func TestRecordOff(t *testing.T) {
	l, err := NewLayout(LayoutConfig{RegionSize: 1 << 20, Channels: 3, RingEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	ring1 := l.RingsOff + 16*RecordSize
	if got := l.RingOff(1); got != ring1 {
		t.Fatalf("RingOff(1) = %#x, want %#x", got, ring1)
	}
	for _, tc := range []struct {
		i    uint32
		slot uint64
	}{
		{0, 0}, {1, 1}, {15, 15}, {16, 0}, {17, 1}, {0x7fffffff, 15}, {0x80000000, 0}, {math.MaxUint32, 15},
	} {
		if got, want := l.RecordOff(1, tc.i), ring1+tc.slot*RecordSize; got != want {
			t.Errorf("RecordOff(1, %#x) = %#x, want %#x", tc.i, got, want)
		}
	}
	// Free-running indices wrap at 2^32 onto consecutive slots.
	if a, b := l.RecordOff(2, math.MaxUint32), l.RecordOff(2, 0); b != l.RingOff(2) || a != l.RingOff(2)+15*RecordSize {
		t.Errorf("wrap: RecordOff(2, max) = %#x, RecordOff(2, 0) = %#x", a, b)
	}
	if got := l.ChannelOff(2); got != l.ChannelsOff+2*ChannelDescSize {
		t.Errorf("ChannelOff(2) = %#x", got)
	}
}

func TestVectors(t *testing.T) {
	for _, n := range []int{1, 4, MaxChannels} {
		if Vectors(n) != n+2 || SyscallVector(n) != n || ControlVector(n) != n+1 {
			t.Errorf("%d channels: vectors %d, syscall %d, control %d", n, Vectors(n), SyscallVector(n), ControlVector(n))
		}
		if ControlVector(n) >= Vectors(n) || SyscallVector(n) == ControlVector(n) {
			t.Errorf("%d channels: syscall/control vectors out of range or equal", n)
		}
	}
}

func TestSyscallAreaSize(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want uint64
	}{
		{0, 0},
		{64, PageSize + 2*PageSize},
		{MaxSyscallSlots, PageSize + MaxSyscallSlots*(SyscallSlotSize+SyscallRingEntrySize)},
	} {
		if got := SyscallAreaSize(tc.n); got != tc.want {
			t.Errorf("SyscallAreaSize(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	// The ready bitmap (one bit a slot) must fit in its page.
	if MaxSyscallSlots/8 > SyscallSlotsOff-SyscallBitmapOff {
		t.Errorf("bitmap of %d slots does not fit in %d bytes", MaxSyscallSlots, SyscallSlotsOff-SyscallBitmapOff)
	}
}
