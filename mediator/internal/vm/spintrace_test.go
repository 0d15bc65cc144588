package vm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/internal/spin"
)

// TestSpinTrace: with SLUICE_SPIN_TRACE set, a VM whose guest runs NOPs
// back to back writes its spins' gaps when its doorbells stop: spins
// started, looks that forwarded the NOPs, and quantiles in order.
func TestSpinTrace(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(SpinTraceEnv, dir)
	v, _, ch := stormVM(t, "traced", Config{SpinWindow: spin.DefaultWindow, SpinBudget: spin.NewBudget(1)})
	runNOPs(t, ch, 2000)
	if err := v.StopDoorbells(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "spin-traced.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		VM                  string
		Spins               int64
		Look, Forward, Pass SpinGaps
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	// The spin finds some of the NOPs before their doorbells (it may
	// find none of a few on a loaded machine, never all of them missed).
	if got.VM != "traced" || got.Spins < 1 || got.Forward.N < 1 || got.Look.N < 1 || got.Forward.N > 2000 {
		t.Fatalf("trace %s", b)
	}
	for _, g := range []SpinGaps{got.Look, got.Forward, got.Pass} {
		if g.N > 0 && !(g.P50 <= g.P90 && g.P90 <= g.P99 && g.P99 <= g.P999 && g.P999 <= g.Max) {
			t.Fatalf("quantiles out of order: %s", b)
		}
	}
}
