package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/mediator/internal/accounting"
)

// TestArbitrationAuto: sluiced --arbitration auto needs the wall clock,
// starts under the driver's arbitration, and says so in its stats.
func TestArbitrationAuto(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Arbitration, cfg.Clock = "auto", "virtual"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "arbitration auto needs the wall clock") {
		t.Fatalf("auto on the virtual clock: %v", err)
	}
	cfg.Arbitration = "sometimes"
	if err := cfg.Validate(); err == nil {
		t.Fatal("an unknown arbitration was accepted")
	}
	cfg = DefaultConfig()
	cfg.Clock, cfg.Arbitration = "wall", "auto"
	st := startedStats(t, cfg)
	if st.Arbitration != "driver" || !st.ArbitrationAuto || st.ArbitrationSwitches != 0 {
		t.Fatalf("stats: arbitration %q, auto %v, %d switches; want driver under auto, none yet",
			st.Arbitration, st.ArbitrationAuto, st.ArbitrationSwitches)
	}
}

// TestArbitrationDefault: a daemon that names no arbitration runs auto
// wherever it schedules (the wall clock, accounting on), whatever its
// policy at start (auto keeps the driver's in force under none or
// timeslice, and follows a policy set later), and the driver's where it
// schedules nothing: the virtual clock (which it accepts, unlike a named
// auto) or accounting off.
func TestArbitrationDefault(t *testing.T) {
	for _, c := range []struct {
		policy, clock, accounting string
		auto                      bool
	}{
		{"dfq", "wall", "loga", true},
		{"cap", "wall", "loga", true},
		{"none", "wall", "loga", true},
		{"timeslice", "wall", "loga", true},
		{"dfq", "virtual", "loga", false},
		{"none", "wall", "off", false},
	} {
		t.Run(c.policy+","+c.clock+","+c.accounting, func(t *testing.T) {
			cfg := DefaultConfig()
			if cfg.Arbitration != "" {
				t.Fatalf("the default config names arbitration %q, want none (resolved at start)", cfg.Arbitration)
			}
			cfg.Clock, cfg.Policy = c.clock, c.policy
			cfg.Accounting.Method = accounting.Method(c.accounting)
			st := startedStats(t, cfg)
			if st.Arbitration != "driver" || st.ArbitrationAuto != c.auto {
				t.Fatalf("stats: arbitration %q, auto %v; want driver in force, auto %v", st.Arbitration, st.ArbitrationAuto, c.auto)
			}
		})
	}
}

// TestArbitrationDefaultAfterPolicySet: a daemon started under dfq whose
// policy is set to timeslice at run time (persisted) restarts under
// timeslice, and still under auto: the default does not depend on the
// policy at (re)start (it was the driver's, and a later policy set dfq
// never reached turns).
func TestArbitrationDefaultAfterPolicySet(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Clock, cfg.Policy = "wall", "dfq"
	dir := t.TempDir()
	d := startIn(t, cfg, dir)
	if _, err := d.SetPolicy(context.Background(), hostapi.PolicyState{Policy: "timeslice"}); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d = startIn(t, cfg, dir)
	defer d.Close()
	if p, _ := d.Policy(context.Background()); p.Policy != "timeslice" {
		t.Fatalf("restarted under policy %q, want the persisted timeslice", p.Policy)
	}
	st, err := d.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.ArbitrationAuto || st.Arbitration != "driver" {
		t.Fatalf("restarted under timeslice: arbitration %q, auto %v; want auto, the driver's in force", st.Arbitration, st.ArbitrationAuto)
	}
}

// startIn starts a daemon of cfg with its socket and state in dir and no
// syscall proxy.
func startIn(t *testing.T, cfg Config, dir string) *Daemon {
	t.Helper()
	cfg.Socket, cfg.StateDir, cfg.Proxy.Binary = filepath.Join(dir, "s.sock"), dir, "off"
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// startedStats starts a daemon of cfg (its socket and state in a temporary
// folder, no syscall proxy) and returns its first stats.
func startedStats(t *testing.T, cfg Config) hostapi.Stats {
	t.Helper()
	d := startIn(t, cfg, t.TempDir())
	defer d.Close()
	st, err := d.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}
