package spec

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// oneVM returns a spec with one VM named a; vmKeys are extra lines of the VM (indented by the caller as
// "    key: value\n"), workload the inside of its workload flow mapping.
func oneVM(top, vmKeys, workload string) string {
	return top + "vms:\n  - name: a\n" + vmKeys + "    workload: {" + workload + "}\n"
}

const throttle = "kind: throttle, kernel_us: 100"

func TestLoadExample(t *testing.T) {
	got, err := Load(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{
		Backend: BackendSim, Clock: ClockVirtual, Policy: PolicyDFQ, Accounting: AccountingLoGA,
		Duration: 10 * time.Second, Seed: 1,
		VMs: []VM{
			{Name: "app", Weight: 1, Cap: 0.5, Channels: 1, Count: 1,
				Workload: Workload{Kind: KindThrottle, KernelUS: 100}},
			{Name: "job", Weight: 1, Channels: 1, Count: 1,
				Workload: Workload{Kind: KindApp, Kernels: 2000, KernelUS: 150, SleepUS: 20}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if w := got.Warnings(); len(w) != 1 || !strings.Contains(w[0], "vms[0].cap: ignored under policy dfq") {
		t.Errorf("warnings %q", w)
	}
}

func TestParseDefaults(t *testing.T) {
	got, err := Parse([]byte("vms:\n  - name: j\n    workload: {kind: app, kernels: 3, kernel_us: 7}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{
		Backend: DefaultBackend, Clock: DefaultClock, Policy: DefaultPolicy, Accounting: DefaultAccounting,
		Seed: DefaultSeed,
		VMs: []VM{{Name: "j", Weight: 1, Channels: 1, Count: 1,
			Workload: Workload{Kind: KindApp, Kernels: 3, KernelUS: 7}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseValues(t *testing.T) {
	tests := []struct {
		name, yaml string
		check      func(Spec) bool
	}{
		{"duration with minutes", oneVM("duration: 1m30s\n", "", throttle),
			func(s Spec) bool { return s.Duration == 90*time.Second }},
		{"duration in ms", oneVM("duration: 500ms\n", "", throttle),
			func(s Spec) bool { return s.Duration == 500*time.Millisecond }},
		{"seed zero and negative allowed", oneVM("duration: 1s\nseed: -5\n", "", throttle),
			func(s Spec) bool { return s.Seed == -5 }},
		{"hex integer", oneVM("duration: 1s\n", "    weight: 0x10\n", throttle),
			func(s Spec) bool { return s.VMs[0].Weight == 16 }},
		{"cap 1 as integer", oneVM("duration: 1s\npolicy: cap\n", "    cap: 1\n", throttle),
			func(s Spec) bool { return s.VMs[0].Cap == 1 }},
		{"numeric name", "duration: 1s\nvms:\n  - name: 007\n    workload: {" + throttle + "}\n",
			func(s Spec) bool { return s.VMs[0].Name == "007" }},
		{"anchors inside vms", "duration: 1s\nvms:\n  - name: a\n    workload: &w {" + throttle +
			"}\n  - name: b\n    workload: *w\n",
			func(s Spec) bool { return s.VMs[1].Workload == s.VMs[0].Workload && s.VMs[1].Workload.KernelUS == 100 }},
		{"cuda on the wall clock", oneVM("duration: 1s\nbackend: cuda\nclock: wall\n", "", throttle),
			func(s Spec) bool { return s.Backend == BackendCUDA && s.Clock == ClockWall }},
		{"app VMs need no duration", oneVM("", "", "kind: app, kernels: 1, kernel_us: 1"),
			func(s Spec) bool { return s.Duration == 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(s) {
				t.Fatalf("unexpected spec %+v", s)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"unknown top key", oneVM("duration: 1s\nfoo: 1\n", "", throttle), []string{"foo: unknown key, expected one of backend, clock, policy, accounting, duration, seed, tuning, vms (line 2)"}},
		{"unknown workload key", "duration: 1s\nvms:\n  - name: a\n    workload: {" + throttle + "}\n  - name: b\n    workload:\n      kind: throttle\n      kernel_ms: 5\n",
			[]string{"vms[1].workload.kernel_ms: unknown key", "(line 8)", "vms[1].workload.kernel_us: required"}},
		{"unknown vm key", oneVM("duration: 1s\n", "    weigth: 2\n", throttle), []string{"vms[0].weigth: unknown key, expected one of name, weight, cap, channels, count, workload (line 4)"}},
		{"odd key quoted", oneVM("duration: 1s\n", "    \"a b\": 2\n", throttle), []string{`vms[0]."a b": unknown key`}},
		{"backend", oneVM("duration: 1s\nbackend: gpu\n", "", throttle), []string{`backend: must be one of sim, cuda, got "gpu" (line 2)`}},
		{"clock", oneVM("duration: 1s\nclock: fast\n", "", throttle), []string{"clock: must be one of virtual, wall"}},
		{"policy", oneVM("duration: 1s\npolicy: DFQ\n", "", throttle), []string{"policy: must be one of none, dfq, cap, timeslice"}},
		{"accounting", oneVM("duration: 1s\naccounting: neon\n", "", throttle), []string{"accounting: must be one of loga, loga-segment-average, neon-sampling, off"}},
		{"cuda virtual", oneVM("duration: 1s\nbackend: cuda\n", "", throttle), []string{"clock: virtual needs backend sim"}},
		{"null value", oneVM("duration: 1s\npolicy:\n", "", throttle), []string{"policy: has no value"}},
		{"duration missing", oneVM("", "", throttle), []string{"duration: required when any VM has a throttle workload"}},
		{"duration zero", oneVM("duration: 0s\n", "", throttle), []string{"duration: must be positive"}},
		{"duration zero app only", oneVM("duration: 0s\n", "", "kind: app, kernels: 1, kernel_us: 1"), []string{"duration: must be positive"}},
		{"duration negative", oneVM("duration: -1s\n", "", throttle), []string{"duration: must be positive"}},
		{"duration too long", oneVM("duration: 25h\n", "", throttle), []string{"duration: must be positive and at most 24h0m0s"}},
		{"duration bare", oneVM("duration: 10\n", "", throttle), []string{"duration: must be a duration with a unit", "bare number has no unit", "(line 1)"}},
		{"duration bare quoted", oneVM("duration: \"10\"\n", "", throttle), []string{"duration: must be a duration with a unit", "bare number"}},
		{"duration junk", oneVM("duration: soon\n", "", throttle), []string{`duration: must be a duration with a unit (ns, us, ms, s, m, h) such as 10s, 500ms or 1m, got "soon"`}},
		{"duration list", oneVM("duration: [1s]\n", "", throttle), []string{"duration: must be a duration, got a list"}},
		{"seed", oneVM("duration: 1s\nseed: x\n", "", throttle), []string{"seed: must be an integer"}},
		{"weight zero", oneVM("duration: 1s\n", "    weight: 0\n", throttle), []string{"vms[0].weight: must be an integer from 1 to 1000000, got 0 (line 4)"}},
		{"weight big", oneVM("duration: 1s\n", "    weight: 1000001\n", throttle), []string{"vms[0].weight: must be an integer from 1 to 1000000, got 1000001"}},
		{"weight overflow", oneVM("duration: 1s\n", "    weight: 99999999999\n", throttle), []string{"vms[0].weight: must be an integer from 1 to 1000000"}},
		{"weight negative", oneVM("duration: 1s\n", "    weight: -1\n", throttle), []string{"vms[0].weight: must be an integer from 1 to 1000000"}},
		{"weight float", oneVM("duration: 1s\n", "    weight: 1.5\n", throttle), []string{`vms[0].weight: must be an integer from 1 to 1000000, got "1.5"`}},
		{"weight exponent", oneVM("duration: 1s\n", "    weight: 1e3\n", throttle), []string{"vms[0].weight: must be an integer"}},
		{"weight string", oneVM("duration: 1s\n", "    weight: \"2\"\n", throttle), []string{"vms[0].weight: must be an integer"}},
		{"cap zero", oneVM("duration: 1s\npolicy: cap\n", "    cap: 0\n", throttle), []string{"vms[0].cap: must be a number in (0, 1], got 0"}},
		{"cap big", oneVM("duration: 1s\npolicy: cap\n", "    cap: 1.5\n", throttle), []string{"vms[0].cap: must be a number in (0, 1]"}},
		{"cap negative", oneVM("duration: 1s\n", "    cap: -0.1\n", throttle), []string{"vms[0].cap: must be a number in (0, 1]"}},
		{"cap nan", oneVM("duration: 1s\n", "    cap: .nan\n", throttle), []string{"vms[0].cap: must be a number in (0, 1], got NaN"}},
		{"cap string", oneVM("duration: 1s\n", "    cap: half\n", throttle), []string{`vms[0].cap: must be a number in (0, 1], got "half"`}},
		{"channels zero", oneVM("duration: 1s\n", "    channels: 0\n", throttle), []string{"vms[0].channels: must be an integer from 1 to 64"}},
		{"channels big", oneVM("duration: 1s\n", "    channels: 65\n", throttle), []string{"vms[0].channels: must be an integer from 1 to 64, got 65"}},
		{"count zero", oneVM("duration: 1s\n", "    count: 0\n", throttle), []string{"vms[0].count: must be an integer from 1 to 1024"}},
		{"count big", oneVM("duration: 1s\n", "    count: 1025\n", throttle), []string{"vms[0].count: must be an integer from 1 to 1024, got 1025"}},
		{"kind", oneVM("duration: 1s\n", "", "kind: loop, kernel_us: 1"), []string{`vms[0].workload.kind: must be one of throttle, app, got "loop"`}},
		{"kind missing", oneVM("duration: 1s\n", "", "kernel_us: 1"), []string{"vms[0].workload.kind: required, one of throttle, app"}},
		{"kernel_us zero", oneVM("duration: 1s\n", "", "kind: throttle, kernel_us: 0"), []string{"vms[0].workload.kernel_us: must be an integer from 1 to 10000000, got 0"}},
		{"kernel_us missing", oneVM("duration: 1s\n", "", "kind: throttle"), []string{"vms[0].workload.kernel_us: required"}},
		{"kernel_us big", oneVM("duration: 1s\n", "", "kind: throttle, kernel_us: 10000001"), []string{"vms[0].workload.kernel_us: must be an integer from 1 to 10000000"}},
		{"sleep_us negative", oneVM("duration: 1s\n", "", throttle+", sleep_us: -1"), []string{"vms[0].workload.sleep_us: must be an integer from 0 to 3600000000, got -1"}},
		{"app without kernels", oneVM("", "", "kind: app, kernel_us: 1"), []string{"vms[0].workload.kernels: required for kind app"}},
		{"app kernels zero", oneVM("", "", "kind: app, kernels: 0, kernel_us: 1"), []string{"vms[0].workload.kernels: must be an integer from 1 to 100000000, got 0"}},
		{"throttle with kernels", oneVM("duration: 1s\n", "", throttle+", kernels: 5"), []string{"vms[0].workload.kernels: kernels applies to kind app"}},
		{"throttle with kernels zero", oneVM("duration: 1s\n", "", throttle+", kernels: 0"), []string{"vms[0].workload.kernels: kernels applies to kind app"}},
		{"name bad start", "duration: 1s\nvms:\n  - name: -a\n    workload: {" + throttle + "}\n", []string{`vms[0].name: must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$, got "-a" (line 3)`}},
		{"name space", "duration: 1s\nvms:\n  - name: a b\n    workload: {" + throttle + "}\n", []string{"vms[0].name: must match"}},
		{"name too long", "duration: 1s\nvms:\n  - name: " + strings.Repeat("x", 64) + "\n    workload: {" + throttle + "}\n", []string{"vms[0].name: must match"}},
		{"name missing", "duration: 1s\nvms:\n  - workload: {" + throttle + "}\n", []string{"vms[0].name: required (line 3)"}},
		{"name list", "duration: 1s\nvms:\n  - name: [a]\n    workload: {" + throttle + "}\n", []string{"vms[0].name: must be a string, got a list"}},
		{"duplicate names", "duration: 1s\nvms:\n  - name: a\n    workload: {" + throttle + "}\n  - name: a\n    workload: {" + throttle + "}\n",
			[]string{`vms[1].name: name "a" is also the name of vms[0] (line 5)`}},
		{"expanded collision", "duration: 1s\nvms:\n  - name: a\n    count: 2\n    workload: {" + throttle + "}\n  - name: a-1\n    workload: {" + throttle + "}\n",
			[]string{`vms[1].name: name "a-1" is also the name of vms[0] ("a" with count 2)`}},
		{"expanded collision later", "duration: 1s\nvms:\n  - name: a-1\n    workload: {" + throttle + "}\n  - name: a\n    count: 3\n    workload: {" + throttle + "}\n",
			[]string{`vms[1].name: name "a-1" (from count 3) is also the name of vms[0]`}},
		{"too many after expansion", "duration: 1s\nvms:\n" + strings.Repeat("  - {name: a, count: 1024, workload: {"+throttle+"}}\n", 5),
			[]string{"vms: 5120 VMs after expanding count, at most 4096"}},
		{"no vms", "duration: 1s\nvms: []\n", []string{"vms: at least one VM is required"}},
		{"vms missing", "duration: 1s\n", []string{"vms: at least one VM is required"}},
		{"vms mapping", "duration: 1s\nvms: {a: 1}\n", []string{"vms: must be a list of VMs, got a mapping (line 2)"}},
		{"vm scalar", "duration: 1s\nvms:\n  - a\n", []string{`vms[0]: must be a mapping, got "a" (line 3)`}},
		{"workload missing", "duration: 1s\nvms:\n  - name: a\n", []string{"vms[0].workload: required (line 3)"}},
		{"workload null", "duration: 1s\nvms:\n  - name: a\n    workload:\n", []string{"vms[0].workload: has no value"}},
		{"duplicate key", oneVM("duration: 1s\nduration: 2s\n", "", throttle), []string{"duration: duplicate key (line 2)"}},
		{"merge key", "duration: 1s\nbase: &b {weight: 2}\nvms:\n  - <<: *b\n    name: a\n    workload: {" + throttle + "}\n", []string{"vms[0].<<: merge keys are not supported", "base: unknown key"}},
		{"top merge key", "<<: {seed: 2}\n" + oneVM("duration: 1s\n", "", throttle), []string{"<<: merge keys are not supported (line 1)"}},
		{"complex key", "duration: 1s\n? [a]\n: 1\nvms: []\n", []string{"keys must be plain strings, got a list"}},
		{"two documents", oneVM("duration: 1s\n", "", throttle) + "---\nseed: 2\n", []string{"more than one YAML document"}},
		{"empty", "", []string{"the spec is empty"}},
		{"comment only", "# nothing\n", []string{"the spec is empty"}},
		{"null document", "~\n", []string{"the spec is empty"}},
		{"top list", "- a\n", []string{"the spec must be a mapping, got a list"}},
		{"syntax", "vms: [\n", []string{"invalid benchmark spec: yaml: "}},
		{"tab indentation", "vms:\n\t- a\n", []string{"invalid benchmark spec: yaml: "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("no error for\n%s", tt.yaml)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v does not match ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain\n%s", err, w)
				}
			}
		})
	}
}

func TestParseReportsAllProblems(t *testing.T) {
	in := `policy: fair
vms:
  - name: a
    weight: 0
    workload: {kind: throttle, kernel_us: 100, kernels: 3}
  - name: b
    workload:
      kind: app
      kernel_ms: 2
`
	_, err := Parse([]byte(in))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want *Error", err)
	}
	want := []string{
		`policy: must be one of none, dfq, cap, timeslice, got "fair" (line 1)`,
		"duration: required when any VM has a throttle workload (e.g. duration: 10s)",
		"vms[0].weight: must be an integer from 1 to 1000000, got 0 (line 4)",
		"vms[0].workload.kernels: kernels applies to kind app (a throttle workload runs until duration) (line 5)",
		"vms[1].workload.kernel_ms: unknown key, expected one of kind, kernels, kernel_us, sleep_us, depth, start, on, off (line 9)",
		"vms[1].workload.kernel_us: required, an integer from 1 to 10000000 (line 7)",
		"vms[1].workload.kernels: required for kind app, an integer from 1 to 100000000 (line 7)",
	}
	var got []string
	for _, p := range e.Problems {
		got = append(got, p.Error())
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || g == w
		}
		if !found {
			t.Errorf("missing problem %q in\n%s", w, strings.Join(got, "\n"))
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := 1; i < len(e.Problems); i++ {
		if e.Problems[i].Line < e.Problems[i-1].Line {
			t.Errorf("problems not in line order:\n%s", strings.Join(got, "\n"))
		}
	}
	if !strings.HasPrefix(err.Error(), "invalid benchmark spec, 7 problems:\n\t") {
		t.Errorf("message %q", err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path == "" {
		t.Errorf("errors.As *FieldError: %v", fe)
	}
}

func TestValidate(t *testing.T) {
	valid := Spec{Backend: BackendSim, Clock: ClockVirtual, Policy: PolicyCap, Accounting: AccountingOff,
		Duration: time.Second, VMs: []VM{{Name: "a", Weight: 3, Cap: 0.3, Channels: 2, Count: 2,
			Workload: Workload{Kind: KindThrottle, KernelUS: 5}}}}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	err := Spec{}.Validate()
	for _, w := range []string{"backend: required, one of sim, cuda", "clock: required", "policy: required",
		"accounting: required", "vms: at least one VM is required"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("zero spec: %v lacks %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "(line") {
		t.Errorf("Validate names lines: %v", err)
	}
	if err := (Spec{VMs: []VM{{}}}).WithDefaults().Validate(); err == nil ||
		!strings.Contains(err.Error(), "vms[0].name: required") || !strings.Contains(err.Error(), "vms[0].workload: required") {
		t.Errorf("empty VM: %v", err)
	}
}

func TestExpand(t *testing.T) {
	s := Spec{VMs: []VM{
		{Name: "a", Weight: 2, Count: 3, Workload: Workload{Kind: KindThrottle, KernelUS: 1}},
		{Name: "b", Count: 1},
		{Name: "c"},
	}}
	var names []string
	for _, vm := range s.Expand() {
		names = append(names, vm.Name)
		if vm.Count != 1 {
			t.Errorf("%s: count %d", vm.Name, vm.Count)
		}
		if strings.HasPrefix(vm.Name, "a-") && (vm.Weight != 2 || vm.Workload.KernelUS != 1) {
			t.Errorf("%s not a copy: %+v", vm.Name, vm)
		}
	}
	if want := []string{"a-0", "a-1", "a-2", "b", "c"}; !reflect.DeepEqual(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
	if s.VMs[0].Count != 3 || s.VMs[0].Name != "a" {
		t.Errorf("Expand changed the spec: %+v", s.VMs[0])
	}

	overhead, err := Load(filepath.Join("testdata", "overhead-count10.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := overhead.Expand(); len(got) != 11 || got[0].Name != "bg-0" || got[9].Name != "bg-9" || got[10].Name != "job" {
		t.Errorf("overhead expands to %d VMs: %+v", len(got), got)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("testdata: %v %v", files, err)
	}
	specs := map[string]Spec{
		"code-built": {Policy: PolicyCap, Duration: 1500 * time.Millisecond, Seed: 0, VMs: []VM{
			{Name: "true", Cap: 1e-7, Workload: Workload{Kind: KindThrottle, KernelUS: MaxKernelUS, SleepUS: MaxSleepUS}},
			{Name: "0x10", Weight: MaxWeight, Cap: 1.0 / 3, Channels: MaxChannels, Count: MaxCount,
				Workload: Workload{Kind: KindApp, Kernels: MaxKernels, KernelUS: 1}},
		}},
	}
	for _, f := range files {
		s, err := Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		specs[f] = s
	}
	for name, s := range specs {
		t.Run(name, func(t *testing.T) {
			out, err := Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse(out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if want := s.WithDefaults(); !reflect.DeepEqual(back, want) {
				t.Fatalf("round trip\n%s\ngot  %+v\nwant %+v", out, back, want)
			}
			again, err := Marshal(back)
			if err != nil || string(again) != string(out) {
				t.Errorf("not canonical:\n%s\n%s", out, again)
			}
		})
	}
}

func TestMarshalCanonical(t *testing.T) {
	s, err := Parse([]byte("vms:\n- {workload: {kernel_us: 7, kernels: 3, kind: app}, name: j}\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `backend: sim
clock: virtual
policy: dfq
accounting: loga
seed: 1
vms:
  - name: j
    weight: 1
    channels: 1
    count: 1
    workload:
      kind: app
      kernels: 3
      kernel_us: 7
      sleep_us: 0
`
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if _, err := Marshal(Spec{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Marshal of an invalid spec: %v", err)
	}
}

func TestWithDefaultsCopies(t *testing.T) {
	s := Spec{VMs: []VM{{Name: "a"}}}
	d := s.WithDefaults()
	if s.VMs[0].Weight != 0 || d.VMs[0].Weight != 1 || d.VMs[0].Channels != 1 || d.VMs[0].Count != 1 {
		t.Errorf("WithDefaults: %+v from %+v", d, s)
	}
}

func TestWarnings(t *testing.T) {
	s, err := Parse([]byte(oneVM("duration: 3s\npolicy: cap\n", "    cap: 0.5\n", "kind: app, kernels: 1, kernel_us: 1")))
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], "duration: ignored") {
		t.Errorf("warnings %q", w)
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrInvalid) {
		t.Errorf("missing file: %v", err)
	}
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("vms: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), path) {
		t.Errorf("bad file: %v", err)
	}
}

// TestLoadBoundsTheFile: Load reads at most MaxFileSize bytes of a spec
// file: /dev/zero is refused instead of read until memory runs out.
func TestLoadBoundsTheFile(t *testing.T) {
	if _, err := Load("/dev/zero"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "larger than 1024 KiB") {
		t.Fatalf("Load(/dev/zero): %v; want a size error", err)
	}
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(strings.Repeat("#", MaxFileSize+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a spec file of MaxFileSize+1 bytes: %v; want it refused", err)
	}
	ok := "duration: 1s\nvms: [{name: a, workload: {kind: throttle, kernel_us: 1}}]\n"
	if err := os.WriteFile(path, []byte(ok+strings.Repeat("#", MaxFileSize-len(ok))), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Fatalf("a spec file of exactly MaxFileSize bytes: %v", err)
	}
}
