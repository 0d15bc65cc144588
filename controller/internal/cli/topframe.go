package cli

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// topRow is one VM's line of a top frame. Rates are per second of the
// backend clock (Stats.Now), which may be virtual.
type topRow struct {
	name, state     string
	weight          uint32
	gpuNs           uint64
	kernels, errors uint64
	held            bool // held by the scheduler at the second sample
	hasRates        bool // false for a VM with no baseline in prev
	gpuPct          float64
	heldPct         float64 // time held in the interval / the interval
	share           float64
	hasShare        bool // false when the GPU did no work in the interval
	acctShare       float64
	hasAcct         bool // false when accounting charged nothing in the interval
	kernelsPerSec   float64
	doorbellsPerSec float64
	hasSys          bool    // the VM serves GPU system calls and has a rate
	syscallsPerSec  float64 // GPU system calls taken per second
	proxyPct        float64 // its proxy's CPU time over the interval, % of a core
	memUsed         uint64  // device memory its buffers hold now
	memQuota        uint64  // its device memory quota, 0: none
	inflightNs      int64   // estimated GPU time forwarded and not completed
	budgetNs        int64   // its in-flight budget, 0: none
	estimateNs      int64   // what a kernel or copy is costed at, 0: none measured
	timeouts        int64   // commands past its longest command
}

// topFrame is what one refresh of "top" shows.
type topFrame struct {
	backend, clock     string
	policy, accounting string
	arbitration        string // "turns (holder HOLDER)" under turns, "auto: IN FORCE, N switches" under auto, else empty
	intervalNs         int64  // <= 0: no usable interval, rates are unknown
	util               float64
	pollerPct          float64 // poller CPU time / interval, in % of one core
	hasPoller          bool
	rows               []topRow
}

// delta is cur-prev for a counter, false when the counter went backwards
// (daemon restart, VM recreated).
func delta(prev, cur uint64) (uint64, bool) {
	if cur < prev {
		return 0, false
	}
	return cur - prev, true
}

// deltaSigned is delta for the int64 counters of the scheduler.
func deltaSigned(prev, cur int64) (uint64, bool) {
	if cur < prev {
		return 0, false
	}
	return uint64(cur - prev), true
}

// vmDeltas are one VM's counter deltas over an interval.
type vmDeltas struct{ busy, kernels, doorbells, held, accounted uint64 }

// deltasOf returns a VM's deltas, false when any counter went backwards.
func deltasOf(p, v hostapi.VMStats) (vmDeltas, bool) {
	var d vmDeltas
	var ok [5]bool
	d.busy, ok[0] = delta(p.Usage.GPUNs, v.Usage.GPUNs)
	d.kernels, ok[1] = delta(p.Usage.Kernels, v.Usage.Kernels)
	d.doorbells, ok[2] = delta(p.Doorbells, v.Doorbells)
	d.held, ok[3] = deltaSigned(p.HeldNs, v.HeldNs)
	d.accounted, ok[4] = deltaSigned(p.AccountedNs, v.AccountedNs)
	return d, ok == [5]bool{true, true, true, true, true}
}

// syscallRates is a VM's GPU system calls per second and its proxy's CPU
// over the interval; false without syscalls or when a counter went back
// (the proxy was restarted: its CPU time starts again).
func syscallRates(p, v *hostapi.SyscallStats, intervalNs int64) (bool, float64, float64) {
	if p == nil || v == nil {
		return false, 0, 0
	}
	calls, ok := delta(sumCounts(p.Calls), sumCounts(v.Calls))
	cpu, ok2 := deltaSigned(p.ProxyCPUNs, v.ProxyCPUNs)
	if !ok || !ok2 {
		return false, 0, 0
	}
	return true, float64(calls) / (float64(intervalNs) / 1e9), 100 * float64(cpu) / float64(intervalNs)
}

func sumCounts(m map[string]uint64) uint64 {
	var n uint64
	for _, c := range m {
		n += c
	}
	return n
}

// computeTop derives per-VM rates and shares from two snapshots. A VM is
// matched across snapshots by name and ID, so a recreated VM starts without
// rates instead of showing a bogus negative delta.
func computeTop(prev, cur hostapi.Stats) topFrame {
	f := topFrame{backend: cur.Backend, clock: cur.Clock, policy: cur.Policy, accounting: cur.Accounting,
		intervalNs: cur.Now - prev.Now}
	if cur.Arbitration == "turns" {
		f.arbitration = "turns (holder " + orDash(clean(cur.TurnHolder)) + ")"
	}
	if cur.ArbitrationAuto {
		inForce := f.arbitration
		if inForce == "" {
			inForce = "driver"
		}
		f.arbitration = fmt.Sprintf("auto: %s, %d switches", inForce, cur.ArbitrationSwitches)
	}
	before := make(map[string]hostapi.VMStats, len(prev.VMs))
	for _, v := range prev.VMs {
		before[v.Name] = v
	}
	ds := make([]vmDeltas, len(cur.VMs))
	var sum vmDeltas
	for i, v := range cur.VMs {
		r := topRow{name: v.Name, state: v.State, weight: v.Weight, gpuNs: v.Usage.GPUNs,
			kernels: v.Usage.Kernels, errors: v.Usage.Errors, held: v.Held, memUsed: v.MemoryUsed, memQuota: v.Memory,
			inflightNs: v.InflightNs, budgetNs: v.InflightBudgetNs, estimateNs: v.EstimateNs, timeouts: v.Timeouts}
		if p, ok := before[v.Name]; ok && p.ID == v.ID && f.intervalNs > 0 {
			if d, ok := deltasOf(p, v); ok {
				secs, ns := float64(f.intervalNs)/1e9, float64(f.intervalNs)
				r.hasRates = true
				r.gpuPct = 100 * float64(d.busy) / ns
				r.heldPct = 100 * float64(d.held) / ns
				r.kernelsPerSec = float64(d.kernels) / secs
				r.doorbellsPerSec = float64(d.doorbells) / secs
				ds[i] = d
				sum.busy, sum.accounted = sum.busy+d.busy, sum.accounted+d.accounted
				r.hasSys, r.syscallsPerSec, r.proxyPct = syscallRates(p.Syscalls, v.Syscalls, f.intervalNs)
			}
		}
		f.rows = append(f.rows, r)
	}
	// The daemon's total drops when a VM is deleted; the sum of the matched
	// VMs' deltas is then the best denominator left.
	total, ok := delta(prev.GPUBusyNs, cur.GPUBusyNs)
	if !ok || total < sum.busy {
		total = sum.busy
	}
	if f.intervalNs > 0 {
		f.util = 100 * float64(total) / float64(f.intervalNs)
		if d, ok := deltaSigned(prev.PollerCPUNs, cur.PollerCPUNs); ok {
			f.pollerPct, f.hasPoller = 100*float64(d)/float64(f.intervalNs), true
		}
	}
	for i := range f.rows {
		if f.rows[i].hasRates && total > 0 {
			f.rows[i].share, f.rows[i].hasShare = 100*float64(ds[i].busy)/float64(total), true
		}
		if f.rows[i].hasRates && sum.accounted > 0 {
			f.rows[i].acctShare, f.rows[i].hasAcct = 100*float64(ds[i].accounted)/float64(sum.accounted), true
		}
	}
	sort.SliceStable(f.rows, func(i, j int) bool { return f.rows[i].name < f.rows[j].name })
	return f
}

// RenderTopFrame renders the "top" view of the interval between two Stats
// snapshots: a header with backend, clock, interval, utilisation, policy,
// accounting method and the poller's CPU use (and under arbitration turns
// the turn's holder), then one line per VM of cur.
// GPU% is the VM's GPU busy time over the interval of the backend clock,
// SHARE its part of all GPU busy time in the interval, ACCT% its part of
// all GPU time accounting charged in the interval, HELD the part of the
// interval the scheduler held it (yes or no where there is no interval);
// these and the per-second rates are "-" where undefined. IN FLIGHT is the
// estimated GPU time the VM has forwarded and not completed over its
// in-flight budget ("-": none), EST what one of its kernels or copies is
// costed at ("-": none measured yet), TIMEOUTS how many of its commands ran
// past its longest command.
func RenderTopFrame(prev, cur hostapi.Stats) string {
	f := computeTop(prev, cur)
	var b strings.Builder
	interval, util, poller := "-", "-", "-"
	if f.intervalNs > 0 {
		interval = FormatGPUTime(uint64(f.intervalNs))
		util = pct(f.util)
	}
	if f.hasPoller {
		poller = pct(f.pollerPct) + " of a core"
	}
	fmt.Fprintf(&b, "backend: %s  clock: %s  interval: %s  GPU busy: %s  VMs: %d\n",
		clean(f.backend), clean(f.clock), interval, util, len(f.rows))
	arb := ""
	if f.arbitration != "" {
		arb = "  arbitration: " + f.arbitration
	}
	fmt.Fprintf(&b, "policy: %s  accounting: %s  poller CPU: %s%s\n\n",
		orDash(clean(f.policy)), orDash(clean(f.accounting)), poller, arb)
	cols := []column{
		{title: "VM"}, {title: "WEIGHT", right: true}, {title: "STATE"},
		{title: "GPU TIME", right: true}, {title: "GPU%", right: true}, {title: "SHARE", right: true},
		{title: "ACCT%", right: true}, {title: "HELD", right: true},
		{title: "KERNELS/S", right: true}, {title: "KERNELS", right: true},
		{title: "ERRORS", right: true}, {title: "DOORBELLS/S", right: true},
		{title: "SYSCALLS/S", right: true}, {title: "PROXY CPU", right: true},
		{title: "MEMORY", right: true}, {title: "IN FLIGHT", right: true}, {title: "EST", right: true},
		{title: "TIMEOUTS", right: true},
	}
	rows := make([][]string, 0, len(f.rows))
	for _, r := range f.rows {
		gpu, share, acct, kps, dps, sps, pcpu := "-", "-", "-", "-", "-", "-", "-"
		if r.hasSys {
			sps, pcpu = rate(r.syscallsPerSec), pct(r.proxyPct)
		}
		held := "no"
		if r.held {
			held = "yes"
		}
		if r.hasRates {
			gpu, held, kps, dps = pct(r.gpuPct), pct(r.heldPct), rate(r.kernelsPerSec), rate(r.doorbellsPerSec)
		}
		if r.hasShare {
			share = pct(r.share)
		}
		if r.hasAcct {
			acct = pct(r.acctShare)
		}
		rows = append(rows, []string{
			clean(r.name), u64(uint64(r.weight)), clean(r.state), FormatGPUTime(r.gpuNs),
			gpu, share, acct, held, kps, u64(r.kernels), u64(r.errors), dps, sps, pcpu,
			memoryCell(r.memUsed, r.memQuota), inflightCell(r.inflightNs, r.budgetNs), estimateCell(r.estimateNs),
			strconv.FormatInt(r.timeouts, 10),
		})
	}
	b.WriteString(renderTable(cols, rows))
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func pct(v float64) string  { return fmt.Sprintf("%.1f%%", v) }
func rate(v float64) string { return fmt.Sprintf("%.1f", v) }
