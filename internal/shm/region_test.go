package shm

import (
	"strings"
	"testing"
)

func TestRegionAtomics(t *testing.T) {
	r := New(make([]byte, 64))
	r.Store32(8, 0xffff00ff)
	r.And32(8, 0x0000ff0f)
	if got := r.Load32(8); got != 0x0000000f {
		t.Fatalf("And32: %#x", got)
	}
	r.Store64(16, 7)
	if r.CompareAndSwap64(16, 8, 9) || r.Load64(16) != 7 {
		t.Fatal("CompareAndSwap64 swapped a value that was not old")
	}
	if !r.CompareAndSwap64(16, 7, 1<<40) || r.Load64(16) != 1<<40 {
		t.Fatal("CompareAndSwap64 did not swap")
	}
	r.Put64(56, 1<<50|3)
	if r.Load64(56) != 1<<50|3 {
		t.Fatal("Put64 not read back")
	}
	r.Release64(40, 1<<45|9)
	if r.Load64(40) != 1<<45|9 {
		t.Fatal("Release64 not read back")
	}
	if w := r.Words64(48, 2); len(w) != 2 || w[1] != 1<<50|3 {
		t.Fatalf("Words64 = %v", w)
	}
}

func TestRegionBounds(t *testing.T) {
	r := New(make([]byte, 64))
	for name, f := range map[string]func(){
		"past the end":  func() { r.Load64(64) },
		"straddling":    func() { r.Load32(62) },
		"unaligned":     func() { r.Store32(2, 1) },
		"unaligned CAS": func() { r.CompareAndSwap64(4, 0, 1) },
		"unaligned put": func() { r.Put64(4, 1) },
		"put past":      func() { r.Put64(64, 1) },
		"release past":  func() { r.Release64(64, 1) },
		"unaligned rel": func() { r.Release64(12, 1) },
		"words past":    func() { r.Words64(32, 5) },
		"words huge":    func() { r.Words64(0, 1<<62) },
		"words odd":     func() { r.Words64(4, 1) },
		"copy past":     func() { r.CopyIn(60, make([]byte, 8)) },
		"huge offset":   func() { r.And32(1<<63, 0) },
	} {
		func() {
			defer func() {
				if p, ok := recover().(string); !ok || !strings.Contains(p, "outside region") {
					t.Errorf("%s: panic %v", name, p)
				}
			}()
			f()
		}()
	}
}

// TestHints: the cache-line hints change nothing a load sees, anywhere in
// the region, and drop an offset past it.
func TestHints(t *testing.T) {
	b := make([]byte, 4096)
	for i := range b {
		b[i] = byte(i * 7)
	}
	want := append([]byte(nil), b...)
	r := New(b)
	for _, off := range []uint64{0, 1, 63, 64, 4095, 4096, 1 << 40, ^uint64(0)} {
		r.Prefetch(off)
		r.PrefetchW(off)
		r.Demote(off)
	}
	if string(b) != string(want) {
		t.Fatal("a hint changed the region")
	}
}
