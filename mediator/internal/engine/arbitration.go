package engine

import (
	"github.com/sluice-gpu/sluice/mediator/internal/gate"
	"github.com/sluice-gpu/sluice/mediator/internal/sched"
)

// Shares reports whether policy p shares the GPU between VMs that all want
// it (dfq, cap): only then do turns serve a share. Under none nobody is
// scheduled, and under timeslice the scheduler releases one VM at a time
// already; arbitration auto keeps the driver's arbitration under them
// (gate.Gate.EndPeriod).
func Shares(p sched.Policy) bool {
	return p == sched.PolicyDFQ || p == sched.PolicyCap
}

// DefaultFor is the arbitration of a daemon or bench run that names none:
// gate.DefaultArbitration (auto), except where turns make no sense, which
// keep the driver's: a policy that shares nothing at start (Shares; auto
// would stay in the driver's arbitration anyway, and the run says so), or
// no scheduling at all (scheduled false: accounting off, whose poller ends
// no period, or the daemon's virtual clock, which schedules nothing).
func DefaultFor(p sched.Policy, scheduled bool) gate.Arbitration {
	if !scheduled || !Shares(p) {
		return gate.ArbitrationDriver
	}
	return gate.DefaultArbitration
}
