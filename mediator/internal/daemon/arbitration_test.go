package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
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
	dir := t.TempDir()
	cfg.Socket, cfg.StateDir, cfg.Clock, cfg.Arbitration = filepath.Join(dir, "s.sock"), dir, "wall", "auto"
	cfg.Proxy.Binary = "off"
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st, err := d.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Arbitration != "driver" || !st.ArbitrationAuto || st.ArbitrationSwitches != 0 {
		t.Fatalf("stats: arbitration %q, auto %v, %d switches; want driver under auto, none yet",
			st.Arbitration, st.ArbitrationAuto, st.ArbitrationSwitches)
	}
}
