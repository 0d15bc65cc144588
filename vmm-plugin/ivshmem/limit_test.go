package ivshmem

import "testing"

func TestLimiter(t *testing.T) {
	const ms = int64(1e6)
	t.Run("no limit", func(t *testing.T) {
		l := newLimiter(0)
		for i := range 1000 {
			if !l.allow(int64(i)) {
				t.Fatalf("doorbell %d refused without a limit", i)
			}
		}
	})
	t.Run("burst then rate", func(t *testing.T) {
		l := newLimiter(200_000) // burst: a mute's worth, 200
		n := 0
		for l.allow(1) {
			n++
		}
		if n != 200 {
			t.Fatalf("burst %d, want 200", n)
		}
		if l.allow(1 + ms/1000) { // 1 µs later: 0.2 tokens
			t.Fatal("a doorbell 1 µs after the burst was allowed: 0.2 tokens")
		}
		n = 0
		for i := range int64(1000) { // 1 ms, a try every µs: 200 tokens come back
			if l.allow(1 + ms/1000 + (i+1)*ms/1000) {
				n++
			}
		}
		if n < 199 || n > 201 {
			t.Fatalf("%d allowed over 1 ms at 200k/s, want 200", n)
		}
	})
	t.Run("small rates keep a burst of 64", func(t *testing.T) {
		l := newLimiter(10)
		n := 0
		for l.allow(1) {
			n++
		}
		if n != 64 {
			t.Fatalf("burst %d, want 64", n)
		}
	})
}
