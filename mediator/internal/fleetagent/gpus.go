package fleetagent

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-gpu/sluice/api/controllerapi"
)

// ParseGPUs reads a GPU inventory as sluiced --controller-gpus takes it:
// MODEL:SIZE entries separated by commas, indexed in order, SIZE in bytes
// or with a KiB, MiB, GiB or TiB suffix ("H100:80GiB,H100:80GiB").
func ParseGPUs(s string) ([]controllerapi.GPUReport, error) {
	var out []controllerapi.GPUReport
	for i, e := range strings.Split(s, ",") {
		model, size, ok := strings.Cut(strings.TrimSpace(e), ":")
		if !ok || model == "" {
			return nil, fmt.Errorf("GPU %d %q: want MODEL:SIZE, like H100:80GiB", i, e)
		}
		n, err := parseSize(size)
		if err != nil {
			return nil, fmt.Errorf("GPU %d %q: %w", i, e, err)
		}
		out = append(out, controllerapi.GPUReport{Index: i, Model: model, MemoryBytes: n})
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
