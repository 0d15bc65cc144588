package spec

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	// The checked-in specs too: every shape the benchmarks use.
	for _, dir := range checkedIn {
		more, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		files = append(files, more...)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "~", "- a", "vms: [", "duration: 10\n",
		oneVM("duration: 1s\n", "    count: 3\n    cap: 0.5\n", throttle),
		oneVM("", "    weight: 0x7\n", "kind: app, kernels: 2, kernel_us: 3, sleep_us: 1"),
		"duration: 1s\nvms:\n  - name: a\n    workload: &w {" + throttle + "}\n  - name: b\n    workload: *w\n",
		"a: &a [*a]\n",
		"vms: &v [*v]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		_ = s.Expand()
		_ = s.Warnings()
		out, err := Marshal(s)
		if err != nil {
			t.Fatalf("Marshal of a parsed spec: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse of Marshal output: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, s) {
			t.Fatalf("round trip changed the spec\n%s\ngot  %+v\nwant %+v", out, back, s)
		}
	})
}

// FuzzRoundTrip builds specs from fuzzed values rather than fuzzed text, reaching odd names, caps and durations
// that mutated YAML rarely gets to, and checks that every valid one survives Marshal and Parse unchanged.
func FuzzRoundTrip(f *testing.F) {
	f.Add("app", uint32(1), 0.5, 1, 1, "throttle", int64(0), int64(100), int64(0), int64(1e10), int64(1), "dfq")
	f.Add("0x1F", uint32(7), 1e-300, 64, 3, "app", int64(5), int64(1), int64(20), int64(0), int64(-3), "cap")
	f.Add("null", uint32(1), 1.0, 2, 1, "app", int64(1), int64(1), int64(0), int64(1), int64(0), "none")
	f.Fuzz(func(t *testing.T, name string, weight uint32, capv float64, channels, count int, kind string,
		kernels, kernelUS, sleepUS, duration, seed int64, policy string) {
		s := Spec{Policy: Policy(policy), Duration: time.Duration(duration), Seed: seed, VMs: []VM{{
			Name: name, Weight: weight, Cap: capv, Channels: channels, Count: count,
			Workload: Workload{Kind: Kind(kind), Kernels: kernels, KernelUS: kernelUS, SleepUS: sleepUS},
		}}}
		out, err := Marshal(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || s.WithDefaults().Validate() == nil {
				t.Fatalf("Marshal: %v", err)
			}
			return
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse of Marshal output: %v\n%s", err, out)
		}
		if want := s.WithDefaults(); !reflect.DeepEqual(back, want) {
			t.Fatalf("round trip changed the spec\n%s\ngot  %+v\nwant %+v", out, back, want)
		}
	})
}
