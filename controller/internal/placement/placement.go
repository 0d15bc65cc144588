// Package placement picks the GPU a VM goes on. It is pure: the caller
// hands it every candidate GPU with what is placed there already.
//
// A GPU has room for a VM when the VM's memory quota fits beside the quotas
// placed there (a VM without a quota takes none) and it holds fewer than
// MaxVMs VMs. Among the GPUs with room, policy spread picks the one with the
// fewest VMs, then the most free memory; pack picks the one with the most
// VMs, then the least free memory, so that whole GPUs stay free. Ties go to
// the host name and GPU index, so a placement is reproducible.
package placement

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// Policy is how a GPU is chosen among those with room.
type Policy string

// Policies.
const (
	Spread Policy = "spread"
	Pack   Policy = "pack"
)

// Parse returns the policy named s.
func Parse(s string) (Policy, error) {
	switch Policy(s) {
	case Spread, Pack:
		return Policy(s), nil
	}
	return "", fmt.Errorf("placement %q: want spread or pack", s)
}

// Slot is a candidate GPU and what is on it.
type Slot struct {
	Host         string
	GPU          int
	MemoryBytes  int64 // the GPU's
	MemoryPlaced int64 // quotas of the VMs on it
	VMs          int
}

// Free is the memory not promised to a VM.
func (s Slot) Free() int64 { return s.MemoryBytes - s.MemoryPlaced }

// Fits reports whether a VM with memory quota mem fits in s.
func (s Slot) Fits(mem int64, maxVMs int) bool {
	return s.VMs < maxVMs && mem <= s.Free()
}

// Pick returns the slot policy chooses for a VM with memory quota mem;
// fleet.ErrNoCapacity when none has room.
func Pick(policy Policy, slots []Slot, mem int64, maxVMs int) (Slot, error) {
	var fit []Slot
	for _, s := range slots {
		if s.Fits(mem, maxVMs) {
			fit = append(fit, s)
		}
	}
	if len(fit) == 0 {
		return Slot{}, fmt.Errorf("%d GPUs considered, none with %d bytes and a VM slot free: %w", len(slots), mem, fleet.ErrNoCapacity)
	}
	better := func(a, b Slot) int {
		var c int
		if policy == Pack {
			c = cmp.Or(cmp.Compare(b.VMs, a.VMs), cmp.Compare(a.Free(), b.Free()))
		} else {
			c = cmp.Or(cmp.Compare(a.VMs, b.VMs), cmp.Compare(b.Free(), a.Free()))
		}
		return cmp.Or(c, cmp.Compare(a.Host, b.Host), cmp.Compare(a.GPU, b.GPU))
	}
	return slices.MinFunc(fit, better), nil
}
