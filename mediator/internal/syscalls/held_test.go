package syscalls

import "testing"

// A slot's call in flight, and the one before it whose record is late: each
// claimed once, the count of calls in flight back to zero.
func TestHeldTracksTwoCallsPerSlot(t *testing.T) {
	f := &Forwarder{inflight: make([]held, 2)}
	hand := func(seq uint32, seen int64) { f.nIn += f.inflight[1].hand(seq, seen) }
	claim := func(seq uint32, want int64, ok bool) {
		t.Helper()
		if seen, got := f.claimLocked(1, seq); got != ok || seen != want {
			t.Fatalf("claim %d = %d %v, want %d %v", seq, seen, got, want, ok)
		}
	}
	hand(4, 100)
	hand(5, 200) // the GPU published its next call before 4's record came
	if f.nIn != 2 {
		t.Fatalf("in flight %d, want 2", f.nIn)
	}
	claim(4, 100, true)
	claim(4, 0, false) // once only
	claim(5, 200, true)
	if f.nIn != 0 {
		t.Fatalf("in flight %d, want 0", f.nIn)
	}
	// A forged READY with the same seq: still one call.
	hand(6, 300)
	hand(6, 400)
	if f.nIn != 1 {
		t.Fatalf("in flight %d after a same-seq forgery, want 1", f.nIn)
	}
	// Forged twice over: the oldest is dropped, the count stays bounded.
	hand(7, 500)
	hand(8, 600)
	if f.nIn != 2 {
		t.Fatalf("in flight %d, want 2", f.nIn)
	}
	claim(6, 0, false)
	claim(7, 500, true)
	claim(8, 600, true)
	claim(99, 0, false)
	if _, ok := f.claimLocked(7, 1); ok {
		t.Fatal("a slot past the area claimed")
	}
	if f.nIn != 0 {
		t.Fatalf("in flight %d, want 0", f.nIn)
	}
}
