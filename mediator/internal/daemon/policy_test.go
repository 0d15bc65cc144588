package daemon

import (
	"context"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
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
