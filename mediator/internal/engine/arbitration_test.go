package engine

import (
	"testing"

	"github.com/sluice-gpu/sluice/mediator/internal/gate"
	"github.com/sluice-gpu/sluice/mediator/internal/sched"
)

// TestDefaultArbitration: a daemon's default is auto wherever it schedules,
// whatever the policy (it may change at run time), the driver's where it
// schedules nothing; a bench run's, whose policy is fixed, keeps the
// driver's under a policy that shares nothing too.
func TestDefaultArbitration(t *testing.T) {
	if a := Default(true); a != gate.ArbitrationAuto {
		t.Errorf("Default(scheduled) = %s, want auto", a)
	}
	if a := Default(false); a != gate.ArbitrationDriver {
		t.Errorf("Default(not scheduled) = %s, want driver", a)
	}
	for _, c := range []struct {
		p         sched.Policy
		scheduled bool
		want      gate.Arbitration
	}{
		{sched.PolicyDFQ, true, gate.ArbitrationAuto},
		{sched.PolicyCap, true, gate.ArbitrationAuto},
		{sched.PolicyDFQ, false, gate.ArbitrationDriver},
		{sched.PolicyNone, true, gate.ArbitrationDriver},
		{sched.PolicyTimeslice, true, gate.ArbitrationDriver},
	} {
		if a := DefaultFor(c.p, c.scheduled); a != c.want {
			t.Errorf("DefaultFor(%s, %v) = %s, want %s", c.p, c.scheduled, a, c.want)
		}
	}
}
