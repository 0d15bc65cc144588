package bench

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/sluice-gpu/sluice/mediator/backend/cuda"
	"github.com/sluice-gpu/sluice/mediator/bench/spec"
)

// NativeResult is the native baseline of a run on a GPU: the spec's kernels
// launched straight through the driver API by one process with one
// context, a stream per channel of each VM, no mediator (cuda.RunNative).
// It runs right after Sluice's run, on the same GPU.
type NativeResult struct {
	Device     string `json:"device"`
	DurationNs int64  `json:"duration_ns"`
	// GPUBusyNs is the sum of the kernels' own %globaltimer time, as
	// gpu_busy_ns is for Sluice; Utilization is it over duration_ns. In one
	// context the streams' kernels run side by side, so it can pass 1.
	GPUBusyNs   int64   `json:"gpu_busy_ns"`
	Utilization float64 `json:"utilization"`
	// GPUSpanNs is the time at least one kernel ran; Occupancy is it over
	// duration_ns.
	GPUSpanNs     int64   `json:"gpu_span_ns"`
	Occupancy     float64 `json:"occupancy"`
	Kernels       int64   `json:"kernels"`
	KernelsPerSec float64 `json:"kernels_per_sec"`
	// VsNative is Sluice's kernels per second over native's (null without
	// native kernels); VsNativeBusy the same of GPU busy time per second.
	VsNative     *float64 `json:"vs_native"`
	VsNativeBusy *float64 `json:"vs_native_busy"`
	WallNs       int64    `json:"wall_ns"` // how long the native run took
}

// NativeVM is one VM's native figures.
type NativeVM struct {
	Kernels int64 `json:"kernels"`
	GPUNs   int64 `json:"gpu_ns"`
	// KernelsPerSec is over the stretch for a throttle VM, over its
	// turnaround for an app VM.
	KernelsPerSec float64 `json:"kernels_per_sec"`
	LatencyP50Ns  int64   `json:"latency_p50_ns"` // launch to completion seen
	LatencyP99Ns  int64   `json:"latency_p99_ns"`
	TurnaroundNs  int64   `json:"turnaround_ns"`
	// VsNative is the VM's kernels per second under Sluice over native's
	// (null without native kernels).
	VsNative *float64 `json:"vs_native"`
}

// nativePlan is the spec's load for cuda.RunNative: a VM per expanded VM,
// a stream per channel.
func nativePlan(s spec.Spec) cuda.NativePlan {
	p := cuda.NativePlan{DurationNs: int64(s.Duration)}
	for _, vm := range s.Expand() {
		w := vm.Workload
		nv := cuda.NativeVM{
			Name: vm.Name, Streams: vm.Channels, Depth: w.InFlight(),
			KernelNs: w.KernelUS * 1000, SleepNs: w.SleepUS * 1000,
			StartNs: int64(w.Start), OnNs: int64(w.On), OffNs: int64(w.Off),
		}
		if w.Kind == spec.KindApp {
			nv.Kernels = w.Kernels
		}
		p.VMs = append(p.VMs, nv)
	}
	return p
}

// attachNative fills res.Native and each VM's Native from nr, with the
// ratios of Sluice to native.
func attachNative(res *Result, nr *cuda.NativeResult) error {
	if len(nr.VMs) != len(res.VMs) {
		return fmt.Errorf("the native baseline has %d VMs, the run %d", len(nr.VMs), len(res.VMs))
	}
	n := &NativeResult{
		Device: nr.Device, DurationNs: nr.DurationNs, GPUBusyNs: nr.GPUBusyNs, GPUSpanNs: nr.GPUSpanNs,
		Kernels: nr.Kernels, KernelsPerSec: perSec(nr.Kernels, nr.DurationNs),
	}
	if d := nr.DurationNs; d > 0 {
		n.Utilization, n.Occupancy = float64(nr.GPUBusyNs)/float64(d), float64(nr.GPUSpanNs)/float64(d)
	}
	n.VsNative = ratio(perSec(res.Kernels, res.DurationNs), n.KernelsPerSec)
	n.VsNativeBusy = ratio(perSec(res.GPUBusyNs, res.DurationNs), perSec(nr.GPUBusyNs, nr.DurationNs))
	for i := range res.VMs {
		v, nv := &res.VMs[i], nr.VMs[i]
		if v.Name != nv.Name {
			return fmt.Errorf("the native baseline's VM %d is %q, the run's %q", i, nv.Name, v.Name)
		}
		out := &NativeVM{Kernels: nv.Kernels, GPUNs: nv.GPUNs, LatencyP50Ns: nv.LatencyP50Ns,
			LatencyP99Ns: nv.LatencyP99Ns, TurnaroundNs: nv.TurnaroundNs}
		out.KernelsPerSec = perSec(nv.Kernels, stretch(v.Kind, nv.TurnaroundNs, nr.DurationNs))
		out.VsNative = ratio(perSec(v.Kernels, stretch(v.Kind, v.TurnaroundNs, res.DurationNs)), out.KernelsPerSec)
		v.Native = out
	}
	res.Native = n
	return nil
}

// stretch is what a VM's rate is taken over: an app's turnaround, else
// the run's stretch.
func stretch(kind string, turnaround, duration int64) int64 {
	if kind == string(spec.KindApp) {
		return turnaround
	}
	return duration
}

func perSec(n, ns int64) float64 {
	if ns <= 0 {
		return 0
	}
	return float64(n) / (float64(ns) / 1e9)
}

// ratio is a / b, nil when b is 0.
func ratio(a, b float64) *float64 {
	if b == 0 {
		return nil
	}
	r := a / b
	return &r
}

// writeNative writes the native baseline's summary and table.
func writeNative(w io.Writer, r *Result) error {
	n := r.Native
	if n == nil {
		return nil
	}
	_, err := fmt.Fprintf(w, "\nnative baseline on %s (one process, one context, a stream per channel, no mediator): %s measured (run took %s)\n"+
		"GPU busy %s (utilization %.2f%%, occupancy %.2f%%), %d kernels (%.0f/s); Sluice/native: kernels/s %s, GPU busy %s\n\n",
		n.Device, ms(n.DurationNs), ms(n.WallNs), ms(n.GPUBusyNs), 100*n.Utilization, 100*n.Occupancy, n.Kernels,
		n.KernelsPerSec, ratioOrDash(n.VsNative), ratioOrDash(n.VsNativeBusy))
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "VM\tKERNELS\tNATIVE\tKERNELS/S\tNATIVE\tSLUICE/NATIVE\tP99 LATENCY\tNATIVE\tTURNAROUND\tNATIVE\t")
	for _, v := range r.VMs {
		nv := v.Native
		if nv == nil {
			continue
		}
		turn, nturn := "-", "-"
		if v.TurnaroundNs > 0 {
			turn = ms(v.TurnaroundNs)
		}
		if nv.TurnaroundNs > 0 {
			nturn = ms(nv.TurnaroundNs)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n", v.Name, v.Kernels, nv.Kernels,
			perSec(v.Kernels, stretch(v.Kind, v.TurnaroundNs, r.DurationNs)), nv.KernelsPerSec, ratioOrDash(nv.VsNative),
			ms(v.LatencyP99Ns), ms(nv.LatencyP99Ns), turn, nturn)
	}
	return tw.Flush()
}

func ratioOrDash(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *r)
}
