package fleetagent

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/mediator/internal/gpuinv"
)

// ParseGPUs reads a GPU inventory as sluiced --controller-gpus takes it:
// MODEL:SIZE entries separated by commas, indexed in order, SIZE in bytes
// or with a KiB, MiB, GiB or TiB suffix ("H100:80GiB,H100:80GiB").
func ParseGPUs(s string) ([]controllerapi.GPUReport, error) {
	ds, err := ParseDeclared(s)
	if err != nil {
		return nil, err
	}
	out := make([]controllerapi.GPUReport, len(ds))
	for i, d := range ds {
		if d.PCIAddress != "" {
			return nil, fmt.Errorf("GPU %d: a PCI address is matched against sysfs: use Inventory", i)
		}
		out[i] = controllerapi.GPUReport{Index: i, Model: d.Model, MemoryBytes: d.MemoryBytes}
	}
	return out, nil
}

func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	shift := 0
	for i, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if strings.HasSuffix(s, u) {
			s, shift = strings.TrimSpace(strings.TrimSuffix(s, u)), 10*(i+1)
			break
		}
	}
	s = strings.TrimSuffix(s, "B")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, or with a KiB/MiB/GiB/TiB suffix", s)
	}
	return n << shift, nil
}

// DiscoverGPUs reads the host's GPUs from sysfs under root (gpuinv), indexed
// in PCI address order, each reported with memoryBytes: sysfs does not tell
// an NVIDIA GPU's memory (see gpuinv), so the operator sets it
// (--controller-gpu-memory). None found is an empty list.
func DiscoverGPUs(root string, memoryBytes int64) ([]controllerapi.GPUReport, error) {
	gpus, err := gpuinv.Discover(root)
	if err != nil {
		return nil, err
	}
	out := make([]controllerapi.GPUReport, 0, len(gpus))
	for i, g := range gpus {
		out = append(out, pciReport(i, g, memoryBytes))
	}
	return out, nil
}

// ParseSize reads a size as --controller-gpus takes it: bytes, or with a
// KiB, MiB, GiB or TiB suffix.
func ParseSize(s string) (int64, error) { return parseSize(s) }
