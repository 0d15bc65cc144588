package placement

import (
	"errors"
	"testing"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

const gib = int64(1) << 30

// place puts n VMs of mem bytes one after another, as the server does, and
// returns the GPU ("host/gpu") each went to.
func place(t *testing.T, p Policy, slots []Slot, mem int64, n, maxVMs int) []string {
	t.Helper()
	var out []string
	for range n {
		s, err := Pick(p, slots, mem, maxVMs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range slots {
			if slots[i].Host == s.Host && slots[i].GPU == s.GPU {
				slots[i].VMs++
				slots[i].MemoryPlaced += mem
			}
		}
		out = append(out, s.Host+"/"+string(rune('0'+s.GPU)))
	}
	return out
}

func fleetOf() []Slot {
	return []Slot{
		{Host: "a", GPU: 0, MemoryBytes: 80 * gib},
		{Host: "a", GPU: 1, MemoryBytes: 80 * gib},
		{Host: "b", GPU: 0, MemoryBytes: 40 * gib},
	}
}

func TestSpreadRoundRobinsOverGPUs(t *testing.T) {
	got := place(t, Spread, fleetOf(), 10*gib, 4, 8)
	want := []string{"a/0", "a/1", "b/0", "a/0"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("spread placed %v, want %v", got, want)
		}
	}
}

func TestPackFillsOneGPUFirst(t *testing.T) {
	got := place(t, Pack, fleetOf(), 10*gib, 5, 8)
	// The first VM goes to the GPU with the least free memory (b/0, 40 GiB);
	// pack then keeps to it while it has room: 4 VMs, then a/0.
	want := []string{"b/0", "b/0", "b/0", "b/0", "a/0"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pack placed %v, want %v", got, want)
		}
	}
}

func TestNoCapacity(t *testing.T) {
	slots := []Slot{{Host: "a", MemoryBytes: 10 * gib, MemoryPlaced: 8 * gib, VMs: 1}}
	if _, err := Pick(Spread, slots, 3*gib, 8); !errors.Is(err, fleet.ErrNoCapacity) {
		t.Fatalf("memory: %v", err)
	}
	if s, err := Pick(Spread, slots, 2*gib, 8); err != nil || s.Host != "a" {
		t.Fatalf("an exact fit: %+v, %v", s, err)
	}
	if _, err := Pick(Pack, slots, 0, 1); !errors.Is(err, fleet.ErrNoCapacity) {
		t.Fatalf("VM slots: %v", err)
	}
	if _, err := Pick(Pack, nil, 0, 1); !errors.Is(err, fleet.ErrNoCapacity) {
		t.Fatalf("no GPUs: %v", err)
	}
}

func TestParse(t *testing.T) {
	if p, err := Parse("pack"); err != nil || p != Pack {
		t.Fatal(p, err)
	}
	if _, err := Parse("random"); err == nil {
		t.Fatal("random parsed")
	}
}
