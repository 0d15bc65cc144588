package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/mediator/internal/accounting"
	"github.com/sluice-gpu/sluice/mediator/internal/sched"
)

// UpdateVM changes a VM's weight, cap, system-call batching, memory quota,
// longest command or owner at run time; all but the batching are persisted.
func (d *Daemon) UpdateVM(_ context.Context, name string, req hostapi.UpdateVMRequest) (hostapi.VM, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.vms[name]
	if !ok {
		return hostapi.VM{}, fmt.Errorf("vm %q: %w", name, hostapi.ErrNotFound)
	}
	if req.Weight == nil && req.Cap == nil && req.SyscallWindowNs == nil && req.SyscallBatch == nil && req.Memory == nil && req.MaxCommandNs == nil && req.Owner == nil {
		return hostapi.VM{}, fmt.Errorf("vm %q: nothing to change: %w", name, hostapi.ErrInvalid)
	}
	if req.Weight != nil {
		if err := hostapi.CheckWeight(*req.Weight); err != nil {
			return hostapi.VM{}, fmt.Errorf("vm %q: %w", name, err)
		}
	}
	maxCmd := int64(d.cfg.MaxCommand)
	if req.MaxCommandNs != nil && *req.MaxCommandNs != 0 { // 0: back to the daemon's
		maxCmd = *req.MaxCommandNs
		if err := checkMaxCommand(maxCmd); err != nil {
			return hostapi.VM{}, fmt.Errorf("vm %q: %w", name, err)
		}
	}
	// Checked first, applied last: a refused weight or cap leaves the
	// batching as it was.
	apply, err := syscallChange(e, req)
	if err != nil {
		return hostapi.VM{}, err
	}
	setOwner, err := ownerChange(e, req)
	if err != nil {
		return hostapi.VM{}, err
	}
	id := e.vm.Config().ID
	if req.Memory != nil { // first: it fails only on a backend without quotas
		if err := e.vm.SetMemoryQuota(*req.Memory); err != nil {
			return hostapi.VM{}, fmt.Errorf("vm %q: %w: %w", name, hostapi.ErrInvalid, err)
		}
		e.req.Memory = *req.Memory
	}
	if req.MaxCommandNs != nil {
		if err := e.vm.SetMaxCommand(maxCmd); err != nil { // checked: it cannot refuse it
			return hostapi.VM{}, fmt.Errorf("vm %q: %w: %w", name, hostapi.ErrInvalid, err)
		}
		e.req.MaxCommandNs = *req.MaxCommandNs
	}
	if req.Weight != nil {
		if err := d.engine.SetWeight(id, *req.Weight); err != nil {
			return hostapi.VM{}, fmt.Errorf("vm %q: weight %d: %w: %w", name, *req.Weight, hostapi.ErrInvalid, err)
		}
		e.req.Weight = *req.Weight
	}
	if req.Cap != nil {
		if err := d.engine.SetCap(id, *req.Cap); err != nil {
			return hostapi.VM{}, fmt.Errorf("vm %q: cap %g: %w: %w", name, *req.Cap, hostapi.ErrInvalid, err)
		}
		e.req.Cap = *req.Cap
	}
	apply()
	setOwner()
	if err := d.saveVMsLocked(); err != nil {
		return hostapi.VM{}, err
	}
	return describe(e), nil
}

// syscallChange checks a new coalescing window or batch for the VM's
// forwarder and returns what applies it (a no-op when the request changes
// neither); the change lasts as long as the endpoint.
func syscallChange(e *entry, req hostapi.UpdateVMRequest) (func(), error) {
	if req.SyscallWindowNs == nil && req.SyscallBatch == nil {
		return func() {}, nil
	}
	f := e.vm.Syscalls()
	if f == nil {
		return nil, fmt.Errorf("vm %q serves no system calls: %w", e.req.Name, hostapi.ErrInvalid)
	}
	c := f.Config()
	if req.SyscallWindowNs != nil {
		c.Window = time.Duration(*req.SyscallWindowNs)
	}
	if req.SyscallBatch != nil {
		c.Batch = *req.SyscallBatch
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("vm %q: %w: %w", e.req.Name, hostapi.ErrInvalid, err)
	}
	return func() { _ = f.SetConfig(c) }, nil // valid: SetConfig cannot refuse it
}

// Policy reports the scheduling policy and the accounting method.
func (d *Daemon) Policy(context.Context) (hostapi.PolicyState, error) {
	return hostapi.PolicyState{Policy: string(d.engine.Policy()), Accounting: d.accountingName()}, nil
}

// SetPolicy switches the scheduling policy at run time; it is persisted.
func (d *Daemon) SetPolicy(_ context.Context, st hostapi.PolicyState) (hostapi.PolicyState, error) {
	p, err := sched.ParsePolicy(st.Policy)
	if err != nil {
		return hostapi.PolicyState{}, fmt.Errorf("policy %q: %w: %w", st.Policy, hostapi.ErrInvalid, err)
	}
	if st.Accounting != "" && st.Accounting != d.accountingName() {
		return hostapi.PolicyState{}, fmt.Errorf("accounting is set when sluiced starts (it is %q): %w", d.accountingName(), hostapi.ErrInvalid)
	}
	if err := checkAccountingPolicy(d.cfg.Accounting.Method, string(p)); err != nil {
		return hostapi.PolicyState{}, fmt.Errorf("%w: %w", err, hostapi.ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.engine.SetPolicy(p); err != nil {
		return hostapi.PolicyState{}, fmt.Errorf("policy %q: %w: %w", st.Policy, hostapi.ErrInvalid, err)
	}
	if err := d.saveVMsLocked(); err != nil {
		return hostapi.PolicyState{}, errors.Join(err)
	}
	return hostapi.PolicyState{Policy: string(p), Accounting: d.accountingName()}, nil
}

// accountingName is the method in effect: off when nothing polls.
func (d *Daemon) accountingName() string {
	if d.poller == nil {
		return string(accounting.MethodOff)
	}
	return string(d.cfg.Accounting.Method)
}
