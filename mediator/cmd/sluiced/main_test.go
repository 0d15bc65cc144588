package main

import (
	"flag"
	"io"
	"os"
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

func TestHelpListsMaxCommand(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	_, _, err = parseFlags([]string{"--help"})
	os.Stderr = stderr
	w.Close()
	out, _ := io.ReadAll(r)
	if err != flag.ErrHelp {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"-max-command duration", "longest command a VM may run", "(default 500ms)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
}
