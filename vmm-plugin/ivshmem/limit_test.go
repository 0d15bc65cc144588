package ivshmem

import "testing"

func TestLimiter(t *testing.T) {
	const ms = int64(1e6)
	t.Run("no limit", func(t *testing.T) {
		l := newLimiter(0)
		for i := range 1000 {
			if !l.allow(int64(i), 1) {
				t.Fatalf("doorbell %d refused without a limit", i)
			}
		}
	})
	t.Run("burst then rate", func(t *testing.T) {
		l := newLimiter(200_000) // burst: a mute's worth, 200
		n := 0
		for l.allow(1, 1) {
			n++
		}
		if n != 200 {
			t.Fatalf("burst %d, want 200", n)
		}
		if l.allow(1+ms/1000, 1) { // 1 µs later: 0.2 tokens
			t.Fatal("a doorbell 1 µs after the burst was allowed: 0.2 tokens")
		}
		// 1 ms brings 200 back, less the 2 refused signals owed.
		n = 0
		for l.allow(1+ms/1000+ms, 1) {
			n++
		}
		if n != 198 {
			t.Fatalf("%d allowed 1 ms after the burst at 200k/s, want 198", n)
		}
	})
	t.Run("signals read at once count each", func(t *testing.T) {
		l := newLimiter(200_000)
		if l.allow(1, 600) {
			t.Fatal("600 signals in one read allowed with a burst of 200")
		}
		// Owed, up to a burst: the next ms pays the debt, the one after
		// refills.
		if l.allow(1+ms, 1) {
			t.Fatal("a signal allowed 1 ms after a read 400 over the burst")
		}
		if !l.allow(1+3*ms, 1) {
			t.Fatal("a signal refused 3 ms after the read")
		}
		// A huge read owes no more than a burst.
		if l.allow(10*ms, 1_000_000) || !l.allow(12*ms+1, 1) {
			t.Fatal("a read of a million signals kept the vector muted past two bursts' time")
		}
	})
	t.Run("small rates keep a burst of 64", func(t *testing.T) {
		l := newLimiter(10)
		n := 0
		for l.allow(1, 1) {
			n++
		}
		if n != 64 {
			t.Fatalf("burst %d, want 64", n)
		}
	})
}
