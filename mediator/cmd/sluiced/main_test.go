package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMaxCommandFlag(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--socket", filepath.Join(dir, "s.sock"), "--state-dir", dir, "--proxy", "off"}
	cfg, _, err := parseFlags(base)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxCommand != 500*time.Millisecond || cfg.Limits.MaxThrottleNs != 500e6 {
		t.Errorf("default: max command %v, longest throttle %d; want 500ms", cfg.MaxCommand, cfg.Limits.MaxThrottleNs)
	}
	cfg, _, err = parseFlags(append(base, "--max-command", "250ms"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxCommand != 250*time.Millisecond || cfg.Limits.MaxThrottleNs != 250e6 {
		t.Errorf("--max-command 250ms: max command %v, longest throttle %d", cfg.MaxCommand, cfg.Limits.MaxThrottleNs)
	}
	for _, bad := range []string{"10us", "2h", "0"} {
		if _, _, err := parseFlags(append(base, "--max-command", bad)); err == nil || !strings.Contains(err.Error(), "longest command") {
			t.Errorf("--max-command %s: %v, want it refused", bad, err)
		}
	}
}

// sluicedOut runs this test binary as sluiced (lock_test.go's TestMain)
// with args and returns its exit status, stdout and stderr.
func sluicedOut(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SLUICED_TEST_MAIN=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

func TestVersionAndHelp(t *testing.T) {
	if code, out, _ := sluicedOut(t, "--version"); code != 0 || out != "sluiced dev\n" {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	code, out, _ := sluicedOut(t, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"--max-command duration", "longest command a VM may run", "(default 500ms)",
		"--poll duration", "SLUICE_STATE_DIR", "Usage:"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	for _, hidden := range []string{"poll-ns", "cuda-worker", "cuda-native"} {
		if strings.Contains(out, hidden) {
			t.Errorf("--help shows %q:\n%s", hidden, out)
		}
	}
}

func TestPollDuration(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--socket", filepath.Join(dir, "s.sock"), "--state-dir", dir, "--proxy", "off"}
	for _, tc := range []struct {
		args []string
		want int64
	}{{nil, 500_000}, {[]string{"--poll", "750us"}, 750_000}, {[]string{"--poll-ns", "300000"}, 300_000}} {
		cfg, _, err := parseFlags(append(base, tc.args...))
		if err != nil || cfg.Accounting.PollNs != tc.want {
			t.Errorf("%q: poll %d ns, %v; want %d", tc.args, cfg.Accounting.PollNs, err, tc.want)
		}
	}
	for _, bad := range []string{"500", "-1ms", "fast"} {
		code, _, stderr := sluicedOut(t, append(base, "--poll", bad)...)
		if code != 2 || !strings.Contains(stderr, "--poll") {
			t.Errorf("--poll %s: exit %d, %q; want 2 and a message naming --poll", bad, code, stderr)
		}
	}
}

// TestWorkerSubcommand: "sluiced cuda-worker" is the GPU worker, not the
// daemon: without the mediator's socket on fd 3 it says so and exits 1
// (the daemon's flags and environment play no part).
func TestWorkerSubcommand(t *testing.T) {
	code, _, stderr := sluicedOut(t, "cuda-worker")
	if code != 1 || !strings.Contains(stderr, "sluice-gpu-worker: no configuration from the mediator") {
		t.Errorf("sluiced cuda-worker: exit %d, %q", code, stderr)
	}
}
