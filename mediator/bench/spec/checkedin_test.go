package spec

import (
	"path/filepath"
	"reflect"
	"testing"
)

// checkedIn are the repository's spec folders: the sim's and the GPU's.
var checkedIn = []string{"../../../bench/specs", "../../../bench/specs-gpu"}

// TestCheckedInSpecs: every spec in the repository parses, the GPU's name
// backend cuda, and the shapes of the fairness issue have a sim twin with
// the same VMs.
func TestCheckedInSpecs(t *testing.T) {
	specs := map[string]map[string]Spec{}
	for _, dir := range checkedIn {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no specs in %s: %v", dir, err)
		}
		specs[dir] = map[string]Spec{}
		for _, f := range files {
			s, err := Load(f)
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			specs[dir][filepath.Base(f)] = s
		}
	}
	for name, s := range specs[checkedIn[1]] {
		if s.Backend != BackendCUDA || s.Clock != ClockWall {
			t.Errorf("%s in specs-gpu: backend %s, clock %s", name, s.Backend, s.Clock)
		}
	}
	for _, name := range []string{
		"alone-5us-depth1.yaml", "alone-5us-depth8.yaml", "alone-5us-depth32.yaml", "alone-10us-depth8.yaml", "alone-10us-depth1.yaml", "alone-10us-depth32.yaml",
		"alone-10ms-depth4.yaml", "skew3-dfq.yaml", "equal8-dfq.yaml", "equal16-dfq.yaml", "mixed-dfq.yaml",
		"weights13-dfq.yaml", "depths-dfq.yaml",
	} {
		gpu, ok1 := specs[checkedIn[1]][name]
		sim, ok2 := specs[checkedIn[0]][name]
		if !ok1 || !ok2 {
			t.Errorf("%s: in specs-gpu %v, in specs %v", name, ok1, ok2)
			continue
		}
		if sim.Backend != BackendSim || sim.Policy != gpu.Policy || sim.Accounting != gpu.Accounting ||
			!reflect.DeepEqual(sim.Expand(), gpu.Expand()) {
			t.Errorf("%s: the sim's twin differs from the GPU's spec", name)
		}
		if gpu.Duration > 5e9 {
			t.Errorf("%s: %s on the GPU, keep it short (make bench-gpu)", name, gpu.Duration)
		}
	}
}
