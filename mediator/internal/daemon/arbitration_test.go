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
// under a policy that shares the GPU on the wall clock, and the driver's
// where turns make no sense: policy none or timeslice at start, the
// virtual clock (which it accepts, unlike a named auto) or accounting off.
func TestArbitrationDefault(t *testing.T) {
	for _, c := range []struct {
		policy, clock, accounting string
		auto                      bool
	}{
		{"dfq", "wall", "loga", true},
		{"cap", "wall", "loga", true},
		{"none", "wall", "loga", false},
		{"timeslice", "wall", "loga", false},
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

// startedStats starts a daemon of cfg (its socket and state in a temporary
// folder, no syscall proxy) and returns its first stats.
func startedStats(t *testing.T, cfg Config) hostapi.Stats {
	t.Helper()
	dir := t.TempDir()
	cfg.Socket, cfg.StateDir, cfg.Proxy.Binary = filepath.Join(dir, "s.sock"), dir, "off"
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st, err := d.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}
