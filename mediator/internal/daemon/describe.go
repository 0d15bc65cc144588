package daemon

import (
	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/api/hostapi"
	channelpkg "github.com/sluice-gpu/sluice/mediator/internal/channel"
	"github.com/sluice-gpu/sluice/mediator/internal/syscalls"
	"github.com/sluice-gpu/sluice/mediator/internal/usage"
	"github.com/sluice-gpu/sluice/mediator/internal/vm"
)

// usage is the VM's ledger base plus what this endpoint has counted.
func (e *entry) usage() usage.Record {
	t := e.vm.Stats().Total
	return e.base.Add(usage.Record{GPUNs: t.BusyNs, Kernels: t.Kernels, Commands: t.Commands, Errors: t.Errors})
}

func describe(e *entry) hostapi.VM {
	c := e.vm.Config()
	peers := len(e.vm.Peers())
	state := hostapi.StateWaiting
	if peers > 0 {
		state = hostapi.StateConnected
	}
	quota, used := e.vm.Memory()
	maxCmd, timeouts := e.vm.MaxCommand()
	budget := e.vm.Budget()
	var sys *hostapi.SyscallStats
	if f := e.vm.Syscalls(); f != nil {
		sys = syscallStats(f.Stats())
	}
	return hostapi.VM{
		Syscalls:     sys,
		Name:         c.Name,
		ID:           c.ID,
		Weight:       e.req.Weight,
		Cap:          e.req.Cap,
		Channels:     int(c.Layout.Channels),
		RingEntries:  int(c.Layout.RingEntries),
		RegionSize:   c.Layout.RegionSize,
		HeapSize:     c.Layout.HeapSize,
		Memory:       quota,
		MemoryUsed:   used,
		MaxCommandNs: maxCmd,
		Timeouts:     timeouts,

		InflightBudgetNs: budget.LimitNs,
		InflightNs:       budget.InFlightNs,
		EstimateNs:       budget.EstimateNs,
		BudgetStalls:     budget.Stalls,

		Endpoint:     c.Socket,
		Owner:        e.req.Owner,
		RefusedPeers: refusals(e.vm.Refusals()),
		Volume:       e.req.Volume,
		Vectors:      abi.Vectors(int(c.Layout.Channels)),
		State:        state,
		Peers:        peers,
		Created:      e.vm.Created(),

		DoorbellsLimited: e.vm.DoorbellsLimited(),
	}
}

func refusals(r vm.Refusals) hostapi.PeerRefusals {
	return hostapi.PeerRefusals{Foreign: r.Foreign, NoHandshake: r.NoHandshake, Full: r.Full, Other: r.Other}
}

func toUsage(name string, r usage.Record) hostapi.Usage {
	return hostapi.Usage{Name: name, GPUNs: r.GPUNs, Kernels: r.Kernels, Commands: r.Commands, Errors: r.Errors, Since: r.Since}
}

func statsOf(e *entry) hostapi.VMStats {
	st := e.vm.Stats()
	vs := hostapi.VMStats{
		VM:        describe(e),
		Usage:     toUsage(e.req.Name, e.base.Add(usage.Record{GPUNs: st.Total.BusyNs, Kernels: st.Total.Kernels, Commands: st.Total.Commands, Errors: st.Total.Errors})),
		Doorbells: st.Doorbells,
	}
	var dispatch, turn channelpkg.Hist
	for i, c := range st.Channels {
		dispatch.Add(c.Dispatch)
		turn.Add(c.Turnaround)
		cs := hostapi.ChannelStats{Index: i, State: c.State.String(), InFlight: c.InFlight, Wakes: c.Wakes}
		vs.Wakes += c.Wakes
		if c.Error != abi.OK {
			cs.Error, cs.ErrorCode = c.Error.String(), uint32(c.Error)
		}
		vs.ChannelStats = append(vs.ChannelStats, cs)
	}
	vs.Dispatch, vs.Turnaround = histogram(dispatch), histogram(turn)
	return vs
}

// histogram is h in the host API's form.
func histogram(h channelpkg.Hist) hostapi.Histogram {
	out := hostapi.Histogram{Counts: h.Counts[:], SumNs: h.SumNs, Count: h.Count(),
		BoundsNs: make([]int64, channelpkg.HistBuckets-1)}
	for b := range out.BoundsNs {
		out.BoundsNs[b] = channelpkg.HistBoundNs(b)
	}
	return out
}

func syscallStats(s syscalls.Stats) *hostapi.SyscallStats {
	return &hostapi.SyscallStats{
		Calls: s.Calls, Errnos: s.Errnos, InFlight: s.InFlight, Batches: s.Batches,
		NonBlocking: s.NonBlocking, Fastcalls: s.Fastcalls, Raced: s.Raced, Lost: s.Lost,
		ProxyState: s.ProxyState, ProxyPID: s.ProxyPID, ProxyCPUNs: int64(s.ProxyCPU),
		ProxyRestarts: s.ProxyRestarts, WindowNs: int64(s.Window), Batch: s.Batch,
		ScanPasses: s.ScanPasses, ScanNs: int64(s.ScanTime), Served: s.Served,
		ServiceNs: int64(s.ServiceTime), ServiceMaxNs: int64(s.ServiceMax),
		PollerBusyNs: int64(s.PollerBusy),
		RingCalls:    s.Ring, RingBad: s.RingBad, RingSkipped: s.RingSkipped,
	}
}
