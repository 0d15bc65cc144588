package server

import (
	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

func ptrIfSet(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func apiToken(t fleet.Token) controllerapi.Token {
	out := controllerapi.Token{Id: t.ID, Name: t.Name, Role: controllerapi.Role(t.Role), Tenant: ptrIfSet(t.Tenant),
		Host: ptrIfSet(t.Host), Created: t.Created, CreatedBy: t.CreatedBy}
	if !t.Revoked.IsZero() {
		r := t.Revoked
		out.Revoked = &r
	}
	return out
}

func apiVM(v fleet.VM, hostDown bool) controllerapi.VM {
	return controllerapi.VM{Name: v.Name, Tenant: v.Tenant, Weight: v.Weight, Cap: v.Cap, MemoryBytes: v.MemoryBytes,
		Host: v.Host, Gpu: v.GPU, HostDown: hostDown, Created: v.Created, Updated: v.Updated, Generation: v.Generation}
}

func apiEvent(e fleet.Event) controllerapi.Event {
	return controllerapi.Event{Id: e.ID, Time: e.Time, Actor: e.Actor, Action: e.Action, Target: e.Target, Detail: ptrIfSet(e.Detail)}
}

func apiUsage(u fleet.UsageInterval) controllerapi.UsageRecord {
	return controllerapi.UsageRecord{Host: u.Host, Vm: u.VM, Tenant: u.Tenant, Seq: u.Seq, Start: u.Start, End: u.End,
		GpuNs: u.GPUNs, Kernels: u.Kernels}
}
