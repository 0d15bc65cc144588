package vm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-gpu/sluice/mediator/internal/lathist"
)

// SpinTraceEnv names the spin diagnostic: with SLUICE_SPIN_TRACE=DIR each
// VM's doorbell goroutine times the gaps between its looks at the rings
// while it spins, and writes their quantiles as JSON to DIR/spin-NAME.json
// when its doorbells stop. For measuring, not for production: unset, a
// look pays one nil check.
const SpinTraceEnv = "SLUICE_SPIN_TRACE"

// spinTrace is one VM's spin figures (the doorbell goroutine's alone).
// A look's gap runs from the clock read of the look before it to its own,
// so it holds what happened in between:
//   - look: a look within a pass that forwarded nothing (the loads of the
//     channels' put and the window's bookkeeping);
//   - forward: a look that forwarded records (copy, validate, the backend's
//     Submit, for the null backend the completion and its publication);
//   - pass: the first look of a pass after the one before it (the poll of
//     the eventfds, the doorbells it read, a yield to the scheduler).
//
// The first look after a spin began has no gap.
type spinTrace struct {
	dir, name           string
	look, forward, pass lathist.Hist
	last                int64 // mono of the last look; 0: none in this spin
	spins               int64 // spins started
}

func newSpinTrace(name string) *spinTrace {
	dir := os.Getenv(SpinTraceEnv)
	if dir == "" {
		return nil
	}
	return &spinTrace{dir: dir, name: name}
}

// looked notes a look at now: first says it is its pass's first, found
// that it forwarded records.
func (t *spinTrace) looked(now int64, first, found bool) {
	if t.last != 0 {
		gap := now - t.last
		switch {
		case first:
			t.pass.Add(gap)
		case found:
			t.forward.Add(gap)
		default:
			t.look.Add(gap)
		}
	}
	t.last = now
}

// stopped notes that the spin ended: the wait until the next is no gap.
func (t *spinTrace) stopped() { t.last = 0 }

// SpinGaps is one kind of gap's figures in a spin trace.
type SpinGaps struct {
	N    int64 `json:"n"`
	P50  int64 `json:"p50_ns"`
	P90  int64 `json:"p90_ns"`
	P99  int64 `json:"p99_ns"`
	P999 int64 `json:"p999_ns"`
	Max  int64 `json:"max_ns"` // the upper bound of the largest gap's bucket
}

func gaps(h *lathist.Hist) SpinGaps {
	return SpinGaps{N: h.N(), P50: h.Quantile(0.5), P90: h.Quantile(0.9), P99: h.Quantile(0.99),
		P999: h.Quantile(0.999), Max: h.Quantile(1)}
}

// write writes the trace to DIR/spin-NAME.json.
func (t *spinTrace) write() error {
	b, err := json.MarshalIndent(struct {
		VM      string   `json:"vm"`
		Spins   int64    `json:"spins"`
		Look    SpinGaps `json:"look"`
		Forward SpinGaps `json:"forward"`
		Pass    SpinGaps `json:"pass"`
	}{t.name, t.spins, gaps(&t.look), gaps(&t.forward), gaps(&t.pass)}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the spin trace: %w", err)
	}
	path := filepath.Join(t.dir, "spin-"+t.name+".json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the spin trace: %w", err)
	}
	return nil
}
