package cli

import (
	"fmt"
	"sort"
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
	hasRates        bool // false for a VM with no baseline in prev
	gpuPct          float64
	share           float64
	hasShare        bool // false when the GPU did no work in the interval
	kernelsPerSec   float64
	doorbellsPerSec float64
}

// topFrame is what one refresh of "top" shows.
type topFrame struct {
	backend, clock string
	intervalNs     int64 // <= 0: no usable interval, rates are unknown
	util           float64
	rows           []topRow
}

// delta is cur-prev for a counter, false when the counter went backwards
// (daemon restart, VM recreated).
func delta(prev, cur uint64) (uint64, bool) {
	if cur < prev {
		return 0, false
	}
	return cur - prev, true
}

// computeTop derives per-VM rates and shares from two snapshots. A VM is
// matched across snapshots by name and ID, so a recreated VM starts without
// rates instead of showing a bogus negative delta.
func computeTop(prev, cur hostapi.Stats) topFrame {
	f := topFrame{backend: cur.Backend, clock: cur.Clock, intervalNs: cur.Now - prev.Now}
	before := make(map[string]hostapi.VMStats, len(prev.VMs))
	for _, v := range prev.VMs {
		before[v.Name] = v
	}
	busy := make([]uint64, len(cur.VMs))
	var sumBusy uint64
	for i, v := range cur.VMs {
		r := topRow{name: v.Name, state: v.State, weight: v.Weight, gpuNs: v.Usage.GPUNs,
			kernels: v.Usage.Kernels, errors: v.Usage.Errors}
		p, ok := before[v.Name]
		if ok && p.ID == v.ID && f.intervalNs > 0 {
			db, ok1 := delta(p.Usage.GPUNs, v.Usage.GPUNs)
			dk, ok2 := delta(p.Usage.Kernels, v.Usage.Kernels)
			dd, ok3 := delta(p.Doorbells, v.Doorbells)
			if ok1 && ok2 && ok3 {
				secs := float64(f.intervalNs) / 1e9
				r.hasRates = true
				r.gpuPct = 100 * float64(db) / float64(f.intervalNs)
				r.kernelsPerSec = float64(dk) / secs
				r.doorbellsPerSec = float64(dd) / secs
				busy[i], sumBusy = db, sumBusy+db
			}
		}
		f.rows = append(f.rows, r)
	}
	// The daemon's total drops when a VM is deleted; the sum of the matched
	// VMs' deltas is then the best denominator left.
	total, ok := delta(prev.GPUBusyNs, cur.GPUBusyNs)
	if !ok || total < sumBusy {
		total = sumBusy
	}
	if f.intervalNs > 0 {
		f.util = 100 * float64(total) / float64(f.intervalNs)
	}
	for i := range f.rows {
		if f.rows[i].hasRates && total > 0 {
			f.rows[i].share, f.rows[i].hasShare = 100*float64(busy[i])/float64(total), true
		}
	}
	sort.SliceStable(f.rows, func(i, j int) bool { return f.rows[i].name < f.rows[j].name })
	return f
}

// RenderTopFrame renders the "top" view of the interval between two Stats
// snapshots: a header with backend, clock, interval and utilisation, then
// one line per VM of cur. GPU% is the VM's GPU busy time over the interval
// of the backend clock, SHARE its part of all GPU busy time in the
// interval; both and the per-second rates are "-" where undefined.
func RenderTopFrame(prev, cur hostapi.Stats) string {
	f := computeTop(prev, cur)
	var b strings.Builder
	interval, util := "-", "-"
	if f.intervalNs > 0 {
		interval = FormatGPUTime(uint64(f.intervalNs))
		util = pct(f.util)
	}
	fmt.Fprintf(&b, "backend: %s  clock: %s  interval: %s  GPU busy: %s  VMs: %d\n\n",
		clean(f.backend), clean(f.clock), interval, util, len(f.rows))
	cols := []column{
		{title: "VM"}, {title: "WEIGHT", right: true}, {title: "STATE"},
		{title: "GPU TIME", right: true}, {title: "GPU%", right: true}, {title: "SHARE", right: true},
		{title: "KERNELS/S", right: true}, {title: "KERNELS", right: true},
		{title: "ERRORS", right: true}, {title: "DOORBELLS/S", right: true},
	}
	rows := make([][]string, 0, len(f.rows))
	for _, r := range f.rows {
		gpu, share, kps, dps := "-", "-", "-", "-"
		if r.hasRates {
			gpu, kps, dps = pct(r.gpuPct), rate(r.kernelsPerSec), rate(r.doorbellsPerSec)
		}
		if r.hasShare {
			share = pct(r.share)
		}
		rows = append(rows, []string{
			clean(r.name), u64(uint64(r.weight)), clean(r.state), FormatGPUTime(r.gpuNs),
			gpu, share, kps, u64(r.kernels), u64(r.errors), dps,
		})
	}
	b.WriteString(renderTable(cols, rows))
	return b.String()
}

func pct(v float64) string  { return fmt.Sprintf("%.1f%%", v) }
func rate(v float64) string { return fmt.Sprintf("%.1f", v) }
