package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestAccountingOffFlags: --accounting off means no scheduling, so it runs
// policy none by default and refuses another policy (as the bench does),
// instead of starting a daemon whose policy never acts.
func TestAccountingOffFlags(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--socket", filepath.Join(dir, "s.sock"), "--state-dir", dir, "--proxy", "off", "--accounting", "off"}
	cfg, _, err := parseFlags(base)
	if err != nil || cfg.Policy != "none" {
		t.Fatalf("--accounting off: policy %q, %v; want none", cfg.Policy, err)
	}
	for _, p := range []string{"dfq", "cap", "timeslice"} {
		_, _, err := parseFlags(append(base, "--policy", p))
		if err == nil || !strings.Contains(err.Error(), "accounting off cannot feed policy "+p) {
			t.Errorf("--accounting off --policy %s: %v, want it refused", p, err)
		}
	}
	if cfg, _, err := parseFlags(append(base, "--policy", "none")); err != nil || cfg.Policy != "none" {
		t.Errorf("--accounting off --policy none: %q, %v", cfg.Policy, err)
	}
	if code := run(append(base, "--policy", "dfq")); code != 2 {
		t.Errorf("sluiced --accounting off --policy dfq exits %d, want 2", code)
	}
	if cfg, _, err := parseFlags(base[:len(base)-2]); err != nil || cfg.Policy != "dfq" {
		t.Errorf("default accounting: policy %q, %v; want dfq", cfg.Policy, err)
	}
}
