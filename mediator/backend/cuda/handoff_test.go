package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// TestHandoffInOrder: completions pushed in batches of any size, across
// chunks, reach a consumer that spins, parks and is woken, each once and
// in order; the consumer sees nothing before it was pushed (go test -race).
func TestHandoffInOrder(t *testing.T) {
	h := newHandoff()
	const total = 200_000
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var taken uint64
		spins := 0
		for taken < total {
			n := h.pushed.Load()
			if n == taken {
				if spins++; spins < 100 {
					continue
				}
				spins = 0
				if !h.park(taken, stop) {
					done <- nil
					return
				}
				continue
			}
			for ; taken < n; taken++ {
				if d := h.pop(); d.c.Tag != taken {
					done <- fmt.Errorf("completion %d came as %d", taken, d.c.Tag)
					return
				}
				h.taken.Store(taken + 1)
			}
		}
		done <- nil
	}()
	rng := rand.New(rand.NewPCG(1, 2))
	var tag uint64
	batch := make([]delivery, 0, 300)
	for tag < total {
		batch = batch[:0]
		for range min(1+rng.IntN(300), total-int(tag)) {
			batch = append(batch, delivery{c: backend.Completion{Tag: tag}})
			tag++
		}
		h.push(batch)
		if rng.IntN(64) == 0 {
			time.Sleep(50 * time.Microsecond) // let it park
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		close(stop)
		t.Fatalf("the consumer took %d of %d and stopped", h.taken.Load(), total)
	}
	if h.pending() {
		t.Fatalf("pending after all %d were taken", total)
	}
}

// TestHandoffReusesChunks: a steady stream of completions, taken as they
// come, allocates nothing once the queue has its chunks.
func TestHandoffReusesChunks(t *testing.T) {
	h := newHandoff()
	one := []delivery{{}}
	var taken uint64
	step := func() {
		for range handoffChunkLen {
			h.push(one)
			h.pop()
			taken++
			h.taken.Store(taken)
		}
	}
	step()
	step()
	if a := testing.AllocsPerRun(20, step); a != 0 {
		t.Fatalf("%.1f allocations a chunk's worth of completions, want 0", a)
	}
}
