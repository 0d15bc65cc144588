package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runBench(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(context.Background(), args, Options{Stdout: &out, Stderr: &errb,
		Getenv: func(string) string { return "" }})
	return out.String(), errb.String(), code
}

func writeSpec(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const tinySpec = `duration: 50ms
policy: cap
vms:
  - name: capped
    cap: 0.25
    workload: {kind: throttle, kernel_us: 100}
  - name: job
    workload: {kind: app, kernels: 10, kernel_us: 100}
`

func TestBenchRunJSON(t *testing.T) {
	out, errs, code := runBench(t, "bench", "run", writeSpec(t, tinySpec), "--json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		Spec       string `json:"spec"`
		DurationNs int64  `json:"duration_ns"`
		VMs        []struct {
			Name         string `json:"name"`
			Kernels      int64  `json:"kernels"`
			TurnaroundNs int64  `json:"turnaround_ns"`
		} `json:"vms"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if res.Spec != "tiny" || res.DurationNs < 50e6 || len(res.VMs) != 2 || res.VMs[1].Kernels != 10 || res.VMs[1].TurnaroundNs <= 0 {
		t.Errorf("result %+v", res)
	}
}

func TestBenchRunText(t *testing.T) {
	out, errs, code := runBench(t, "bench", "run", writeSpec(t, strings.Replace(tinySpec, "policy: cap", "policy: dfq", 1)))
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"tiny: accounting loga, policy dfq", "KERNELS", "capped", "job"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The cap is ignored under dfq, and the spec says so.
	if !strings.Contains(errs, "warning: vms[0].cap: ignored") {
		t.Errorf("stderr %q", errs)
	}
}

func TestBenchRunErrors(t *testing.T) {
	bad := writeSpec(t, "duration: 1s\naccounting: off\npolicy: dfq\nvms: [{name: a, workload: {kind: throttle, kernel_us: 1}}]\n")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no spec", []string{"bench", "run"}, ExitUsage, "missing argument SPEC"},
		{"two specs", []string{"bench", "run", "a", "b"}, ExitUsage, `unexpected argument "b"`},
		{"no rounds", []string{"bench", "run", "a", "--rounds", "0"}, ExitUsage, "--rounds 0: want at least 1"},
		{"no verb", []string{"bench"}, ExitUsage, "missing command"},
		{"missing file", []string{"bench", "run", filepath.Join(t.TempDir(), "none.yaml")}, ExitError, "no such file"},
		{"invalid spec", []string{"bench", "run", writeSpec(t, "vms: []\n")}, ExitError, "vms: at least one VM"},
		{"off with dfq", []string{"bench", "run", bad}, ExitError, "accounting off cannot feed policy dfq"},
		{"endless file", []string{"bench", "run", "/dev/zero"}, ExitError, "/dev/zero is larger than 1024 KiB"},
		{"large file", []string{"bench", "run", writeSpec(t, strings.Repeat("#", 1<<20+1))}, ExitError, "larger than 1024 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs, code := runBench(t, tt.args...)
			if code != tt.code || !strings.Contains(errs, tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errs, tt.code, tt.want)
			}
		})
	}
}

// TestBenchRunNoNative: --native=false is accepted; the sim has no native
// baseline either way.
func TestBenchRunNoNative(t *testing.T) {
	for _, flag := range []string{"--native=false", "--native"} {
		out, errs, code := runBench(t, "bench", "run", writeSpec(t, tinySpec), flag)
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", flag, code, errs)
		}
		if strings.Contains(out, "native") {
			t.Errorf("%s: a sim run mentions native:\n%s", flag, out)
		}
	}
}

// TestBenchRunCPUProfile: SLUICE_CPU_PROFILE writes a profile of the run.
func TestBenchRunCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"bench", "run", writeSpec(t, tinySpec)}, Options{Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string {
			if k == "SLUICE_CPU_PROFILE" {
				return path
			}
			return ""
		}})
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	st, err := os.Stat(path)
	if err != nil || st.Size() == 0 {
		t.Fatalf("profile: %v, %v", st, err)
	}
}
