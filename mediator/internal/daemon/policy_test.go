package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/mediator/internal/accounting"
)

// TestPolicySurvivesRestart: the policy persisted is the one set, even when
// the daemon stops before the scheduler's next period applies it, and the
// restarted daemon runs it from the start.
func TestPolicySurvivesRestart(t *testing.T) {
	for _, clock := range []string{"virtual", "wall"} {
		t.Run(clock, func(t *testing.T) {
			state := t.TempDir()
			ctx := context.Background()
			d := newDaemon(t, clock, state)
			createVM(t, d, "a")
			for _, p := range []string{hostapi.PolicyNone, hostapi.PolicyCap, hostapi.PolicyNone} {
				if st, err := d.SetPolicy(ctx, hostapi.PolicyState{Policy: p}); err != nil || st.Policy != p {
					t.Fatalf("set %s: %+v, %v", p, st, err)
				}
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			d2 := newDaemon(t, clock, state)
			if st, err := d2.Policy(ctx); err != nil || st.Policy != hostapi.PolicyNone {
				t.Fatalf("after a restart: %+v, %v; want policy none", st, err)
			}
			if _, err := d2.GetVM(ctx, "a"); err != nil {
				t.Fatalf("vm not restored: %v", err)
			}
		})
	}
}

// TestAccountingOffPolicy: with accounting off nothing feeds a scheduler,
// so a daemon refuses any policy but none, at start and at run time, and
// does not restore one persisted by an earlier run with accounting.
func TestAccountingOffPolicy(t *testing.T) {
	state := t.TempDir()
	ctx := context.Background()
	d := newDaemon(t, "wall", state)
	if _, err := d.SetPolicy(ctx, hostapi.PolicyState{Policy: hostapi.PolicyCap}); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Socket = filepath.Join(t.TempDir(), "s.sock")
	cfg.StateDir = state
	cfg.Proxy.Binary = "off"
	cfg.Accounting.Method = accounting.MethodOff
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "accounting off cannot feed policy dfq") {
		t.Fatalf("accounting off, policy dfq: %v; want it refused", err)
	}
	cfg.Policy = hostapi.PolicyNone
	off, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if st, err := off.Policy(ctx); err != nil || st.Policy != hostapi.PolicyNone || st.Accounting != "off" {
		t.Fatalf("restarted with accounting off: %+v, %v; want policy none (cap was persisted)", st, err)
	}
	if _, err := off.SetPolicy(ctx, hostapi.PolicyState{Policy: hostapi.PolicyDFQ}); !errors.Is(err, hostapi.ErrInvalid) ||
		!strings.Contains(err.Error(), "accounting off cannot feed policy dfq") {
		t.Fatalf("policy set dfq with accounting off: %v; want it refused", err)
	}
	if st, err := off.SetPolicy(ctx, hostapi.PolicyState{Policy: hostapi.PolicyNone}); err != nil || st.Policy != hostapi.PolicyNone {
		t.Fatalf("policy set none with accounting off: %+v, %v", st, err)
	}
}
