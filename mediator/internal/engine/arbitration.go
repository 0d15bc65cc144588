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

// Default is the arbitration of a daemon that names none:
// gate.DefaultArbitration (auto) wherever it schedules (scheduled: its
// accounting on, on the wall clock), whatever the policy, since its policy
// may change at run time and auto follows it (the driver's in force under
// a policy that shares nothing: gate.Gate.EndPeriod); the driver's where
// nothing is scheduled (accounting off, whose poller ends no period, or
// the virtual clock, which schedules nothing).
func Default(scheduled bool) gate.Arbitration {
	if !scheduled {
		return gate.ArbitrationDriver
	}
	return gate.DefaultArbitration
}

// DefaultFor is the arbitration of a bench run that names none, whose
// policy p is fixed for the run: Default, but the driver's under a policy
// that shares nothing (Shares), where auto would keep the driver's in force
// the whole run anyway, and the run says so.
func DefaultFor(p sched.Policy, scheduled bool) gate.Arbitration {
	if !Shares(p) {
		return gate.ArbitrationDriver
	}
	return Default(scheduled)
}
