package bench

import (
	"fmt"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/bench/spec"
	"github.com/sluice-gpu/sluice/mediator/internal/engine"
	"github.com/sluice-gpu/sluice/mediator/internal/sched"
)

// TestDefaultArbitration: a spec that names no arbitration runs under the
// mediator's default for its policy and accounting (engine.DefaultFor,
// which spec.Arbitration mirrors), says so in its result, and keeps naming
// none when written back; one that names an arbitration runs under it.
func TestDefaultArbitration(t *testing.T) {
	for _, pol := range []spec.Policy{spec.PolicyNone, spec.PolicyDFQ, spec.PolicyCap, spec.PolicyTimeslice} {
		for _, acc := range []spec.Accounting{spec.AccountingLoGA, spec.AccountingLoGASegmentAverage,
			spec.AccountingNEONSampling, spec.AccountingOff} {
			s := spec.Spec{Policy: pol, Accounting: acc}
			scheduled := acc == spec.AccountingLoGA || acc == spec.AccountingLoGASegmentAverage
			if got, want := s.Arbitration(), string(engine.DefaultFor(sched.Policy(pol), scheduled)); got != want {
				t.Errorf("policy %s, accounting %s: spec's arbitration %q, the mediator's default %q", pol, acc, got, want)
			}
		}
	}
	if a := (spec.Spec{}).Arbitration(); a != "auto" {
		t.Fatalf("a spec of the defaults (dfq, loga) runs under %q, want auto", a)
	}
	const y = "duration: 200ms\npolicy: %s\n%svms: [{name: a, workload: {kind: throttle, kernel_us: 100}}, " +
		"{name: b, workload: {kind: throttle, kernel_us: 1000}}]\n"
	for _, c := range []struct{ policy, tuning, want string }{
		{"dfq", "", "auto"},
		{"none", "", ""},
		{"dfq", "tuning: {arbitration: driver}\n", ""},
		{"dfq", "tuning: {arbitration: turns}\n", "turns"},
	} {
		s := parse(t, fmt.Sprintf(y, c.policy, c.tuning))
		r := run(t, fmt.Sprintf(y, c.policy, c.tuning))
		if r.Arbitration != c.want {
			t.Errorf("policy %s, %q: result's arbitration %q, want %q", c.policy, c.tuning, r.Arbitration, c.want)
		}
		if c.want == "auto" && r.ArbitrationInForce != "turns" {
			t.Errorf("two saturating VMs under the default: %q in force, want turns", r.ArbitrationInForce)
		}
		back, err := spec.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		again, err := spec.Parse(back)
		if err != nil {
			t.Fatal(err)
		}
		if again.Tuning.Arbitration != s.Tuning.Arbitration {
			t.Errorf("written back, the arbitration became %q (was %q)", again.Tuning.Arbitration, s.Tuning.Arbitration)
		}
	}
}
