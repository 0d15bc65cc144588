package gpuinv

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNotFound means a declared GPU's PCI address is not a GPU function
// that sysfs shows.
var ErrNotFound = errors.New("no such GPU in sysfs")

// Declared is a GPU that a backend drives, as the daemon declares it: from
// its backend (the CUDA device's name) or from the operator.
type Declared struct {
	// Model is the backend's name for the GPU ("": the PCI function's).
	Model string
	// MemoryBytes is the GPU's memory (0: unknown).
	MemoryBytes int64
	// PCIAddress is the function the backend drives, in any form
	// NormalizeAddress takes ("": the backend does not say: sim, null, and
	// cuda for now).
	PCIAddress string
}

// Served is a declared GPU with the PCI function it drives; PCI is nil
// when sysfs shows none for it (a simulated GPU).
type Served struct {
	Declared
	PCI *GPU
}

// Merged is the host's inventory: the declared GPUs, each with its PCI
// function where there is one, and the GPU functions that no declared GPU
// drives.
type Merged struct {
	Served []Served // in the order declared
	Unused []GPU    // in PCI address order
}

// Merge pairs the declared GPUs with the GPU functions sysfs shows
// (Discover's list), in this order:
//
//  1. A declared GPU with a PCI address gets the function at that address;
//     none there is ErrNotFound, and two declared at one address are an
//     error.
//  2. A declared GPU without one gets the one function of its model that
//     no other declared GPU took (the CUDA driver names an H100 as the PCI
//     id table does: "NVIDIA H100 80GB HBM3"); with none, or several (which
//     one is the backend's is unknown), it has no PCI function, as a
//     simulated GPU has none.
//  3. The functions left over are Unused: on the host, but not driven by
//     any backend, so nothing may be placed on them.
func Merge(declared []Declared, found []GPU) (Merged, error) {
	m := Merged{Served: make([]Served, len(declared))}
	taken := make([]bool, len(found))
	for i, d := range declared {
		m.Served[i].Declared = d
		if d.PCIAddress == "" {
			continue
		}
		addr, err := NormalizeAddress(d.PCIAddress)
		if err != nil {
			return Merged{}, fmt.Errorf("declared GPU %d: %w", i, err)
		}
		j := indexOf(found, func(g GPU) bool { return g.Address == addr })
		if j < 0 {
			return Merged{}, fmt.Errorf("declared GPU %d at %s: %w", i, addr, ErrNotFound)
		}
		if taken[j] {
			return Merged{}, fmt.Errorf("declared GPU %d at %s: declared twice", i, addr)
		}
		taken[j], m.Served[i].PCI = true, &found[j]
	}
	for i, d := range declared {
		if d.PCIAddress != "" || d.Model == "" {
			continue
		}
		if j, ok := onlyFree(found, taken, d.Model); ok {
			taken[j], m.Served[i].PCI = true, &found[j]
		}
	}
	for j := range found {
		if !taken[j] {
			m.Unused = append(m.Unused, found[j])
		}
	}
	return m, nil
}

// onlyFree is the index of the one function of model not taken.
func onlyFree(found []GPU, taken []bool, model string) (int, bool) {
	at := -1
	for j, g := range found {
		if taken[j] || g.Model != model {
			continue
		}
		if at >= 0 {
			return 0, false
		}
		at = j
	}
	return at, at >= 0
}

func indexOf(gs []GPU, f func(GPU) bool) int {
	for i, g := range gs {
		if f(g) {
			return i
		}
	}
	return -1
}

// NormalizeAddress writes a PCI address as sysfs names the function
// (DDDD:BB:DD.F, lower case): it takes the domain in any width (CUDA's and
// NVML's bus ids have 8 digits: "00000000:41:00.0"; a VMD domain has 5)
// or none ("41:00.0", domain 0), in either case.
func NormalizeAddress(s string) (string, error) {
	bad := fmt.Errorf("PCI address %q: want [DOMAIN:]BUS:DEVICE.FUNCTION in hexadecimal, like 0000:41:00.0", s)
	parts := strings.Split(s, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return "", bad
	}
	devfn := strings.Split(parts[2], ".")
	if len(devfn) != 2 {
		return "", bad
	}
	var v [4]uint64
	for i, p := range []struct {
		s    string
		bits int
	}{{parts[0], 32}, {parts[1], 8}, {devfn[0], 5}, {devfn[1], 3}} {
		if p.s == "" || len(p.s) > 8 {
			return "", bad
		}
		n, err := strconv.ParseUint(p.s, 16, p.bits)
		if err != nil {
			return "", bad
		}
		v[i] = n
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", v[0], v[1], v[2], v[3]), nil
}
