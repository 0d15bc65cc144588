package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Result is what a run measured, as `sluicectl bench run --json` prints it.
// Times are nanoseconds on the run's clock (simulated with clock virtual),
// except wall_ns and estimator_ns, which are real time in this process and
// the only fields that differ between two runs of one virtual spec.
type Result struct {
	Spec       string `json:"spec,omitempty"`
	Backend    string `json:"backend"`
	Clock      string `json:"clock"`
	Accounting string `json:"accounting"`
	Policy     string `json:"policy"`
	// Arbitration is "turns" when one VM at a time had work on the GPU,
	// "auto" when the mediator switched between driver and turns
	// (tuning.arbitration); absent for driver.
	Arbitration string `json:"arbitration,omitempty"`
	// Under auto, at the end of the measured stretch: the arbitration in
	// force, the switches between the two, and the scheduling periods
	// that ran under turns (of periods); absent under driver and turns.
	ArbitrationInForce  string  `json:"arbitration_in_force,omitempty"`
	ArbitrationSwitches *uint64 `json:"arbitration_switches,omitempty"`
	TurnsPeriods        *uint64 `json:"turns_periods,omitempty"`
	// MaxVMsInFlight is the most VMs that had commands submitted to the
	// backend and not completed at one instant (under turns 1 without a
	// hand-off, 2 with: the next holder's queued behind the last one's last
	// work; more after overruns, where a command or a hand-off's tail that
	// ran past its grace no longer holds the next turn back).
	MaxVMsInFlight int64 `json:"max_vms_in_flight"`

	// DurationNs is the measured stretch [0, duration_ns]: the spec's
	// duration, or longer if an app VM finished later.
	DurationNs  int64   `json:"duration_ns"`
	GPUBusyNs   int64   `json:"gpu_busy_ns"` // engines busy (compute + copy), the sim's ground truth
	Utilization float64 `json:"utilization"` // gpu_busy_ns / duration_ns
	// GPUOverheadNs is the measured stretch less gpu_busy_ns: the time no
	// VM's kernel ran (context switches, gaps between commands, idle), which
	// is nobody's GPU time and is in no VM's ground truth. On the cuda
	// backend gpu_busy_ns is the sum of the VMs' ground truths (the union of
	// each VM's kernels' own %globaltimer intervals).
	GPUOverheadNs int64 `json:"gpu_overhead_ns"`
	// SwitchOverheadNs is what the backend billed to no VM as switching
	// between VMs' contexts (the cuda backend: a fraction,
	// switch_overhead_fraction, of the time in which several VMs ran at
	// once); 0 on a backend that does not estimate it.
	SwitchOverheadNs       int64   `json:"switch_overhead_ns,omitempty"`
	SwitchOverheadFraction float64 `json:"switch_overhead_fraction,omitempty"`
	// TracedNs is how much of the run the backend billed by what each VM's
	// context held of the GPU, as a tracer in the context counted (the
	// cuda backend, while VMs' contexts ran at once; the switch overhead
	// there is the rest, measured, not the fraction); 0 on a backend
	// without.
	TracedNs int64 `json:"traced_ns,omitempty"`
	Kernels  int64 `json:"kernels"` // completed by all VMs
	// JainIndex is Jain's index of true GPU time ÷ weight over the VMs that
	// demand more than their fair share (JainVMs); 1 with fewer than two.
	JainIndex float64  `json:"jain_index"`
	JainVMs   []string `json:"jain_vms"`
	// AccountingErrorMax is the largest |accounting_error| over the VMs that
	// used the GPU; null when accounting is off.
	AccountingErrorMax *float64 `json:"accounting_error_max"`
	// EstimateErrorMax is the largest |estimate_error| over the VMs that
	// used the GPU; null when accounting is off.
	EstimateErrorMax *float64 `json:"estimate_error_max"`

	// PollerCPUNs is the accounting's CPU cost: with the virtual clock the
	// length of the poll phases (the poller spins through them), with the
	// wall clock the poller thread's CPU time; 0 for off and neon-sampling
	// (timer-driven polling). PollerCPUFraction is it over duration_ns.
	PollerCPUNs       int64   `json:"poller_cpu_ns"`
	PollerCPUFraction float64 `json:"poller_cpu_fraction"`
	EstimatorNs       int64   `json:"estimator_ns"` // real time spent in the estimator (virtual clock)
	Periods           int64   `json:"periods"`      // scheduling periods (NEON: sampling phases)
	MeanPeriodNs      int64   `json:"mean_period_ns"`
	SamplingNs        int64   `json:"sampling_ns"` // NEON: time in sampling phases, drains included
	WallNs            int64   `json:"wall_ns"`     // how long the run took

	VMs []VMResult `json:"vms"`

	// Native is the native baseline (backend cuda; absent on the sim, which
	// has no native run, and with sluicectl bench run --native=false).
	Native *NativeResult `json:"native,omitempty"`
	// Interleaved is the comparison with the native baseline over several
	// rounds (sluicectl bench run --rounds, more than 1); absent otherwise.
	Interleaved *Interleaved `json:"interleaved,omitempty"`
}

// VMResult is one VM's figures over [0, duration_ns].
type VMResult struct {
	Name      string  `json:"name"`
	Kind      string  `json:"kind"`
	Weight    uint32  `json:"weight"`
	Demand    float64 `json:"demand"`     // share it would use alone
	FairShare float64 `json:"fair_share"` // weight / Σ weights

	TrueGPUNs int64 `json:"true_gpu_ns"` // the sim's ground truth
	// AccountedGPUNs is the VM's cumulative GPU time as accounting reports
	// it (usage, billing): with loga and loga-segment-average the exact
	// figure, Σ Busy of its completed commands plus, on the sim, the running
	// ones from their start (backend Status, Since; cuda's truth has
	// completed kernels only, and so has its bill); with neon-sampling NEON's
	// estimate, which is all it has; 0 when off.
	AccountedGPUNs int64 `json:"accounted_gpu_ns"`
	// EstimatedGPUNs is the sampling estimate the scheduler runs on: the sum
	// of the periods' extrapolated charges (loga, loga-segment-average) or
	// NEON's estimate; 0 when off.
	EstimatedGPUNs int64 `json:"estimated_gpu_ns"`
	// AccountingError is accounted ÷ true − 1 and EstimateError estimated ÷
	// true − 1; null when accounting is off or the VM used no GPU time.
	AccountingError *float64 `json:"accounting_error"`
	EstimateError   *float64 `json:"estimate_error"`
	Share           float64  `json:"share"` // true ÷ gpu_busy_ns
	Kernels         int64    `json:"kernels"`
	TurnaroundNs    int64    `json:"turnaround_ns"` // app: first submit to last completion; 0 otherwise
	// LatencyP50Ns and LatencyP99Ns are quantiles of its kernels' latency,
	// from the doorbell that submitted each to the completion the guest
	// saw (an upper bound, within 1.6%); 0 without kernels.
	LatencyP50Ns int64 `json:"latency_p50_ns"`
	LatencyP99Ns int64 `json:"latency_p99_ns"`
	// OldestWaitNs is how long the oldest of its kernels still outstanding
	// at the end had waited since its doorbell (0: none outstanding). A
	// channel the others starved shows here and not in the latency
	// quantiles, which count completed kernels only.
	OldestWaitNs int64 `json:"oldest_wait_ns"`
	HeldBackNs   int64 `json:"held_back_ns"` // time the scheduler held it
	// FirstHeldNs is when the scheduler first held it; null if never.
	FirstHeldNs *int64 `json:"first_held_ns"`
	StartNs     int64  `json:"start_ns"` // when its workload began
	// Outstanding is, under arbitration auto, the share of the measured
	// stretch the VM had work outstanding (forwarded and not completed, or
	// latched by the gate): the measure auto switches on, over the whole
	// run rather than a period; absent otherwise.
	Outstanding *float64 `json:"outstanding,omitempty"`
	// BillKinds is, on the cuda backend, how the VM's bill was made, ns:
	// alone (one VM ran at an interval's ends), traced (its tracer's count,
	// tracing on) and even (several ran, split evenly less the switch
	// overhead's fraction); TracerNs its tracer's count. Absent elsewhere.
	BillKinds *BillKinds `json:"bill_kinds_ns,omitempty"`
	// Native is the VM's load in the native baseline (see Result.Native).
	Native *NativeVM `json:"native,omitempty"`
}

// BillKinds: see VMResult.BillKinds.
type BillKinds struct {
	Alone       int64 `json:"alone"`
	Traced      int64 `json:"traced"`
	Even        int64 `json:"even"`
	TracerNs    int64 `json:"tracer"`
	SwitchesOut int64 `json:"switches_out"` // the switches of its context out that its tracer saw
	// TracerDropped is what of the tracer's count was not billed by it,
	// by why (cuda.DropNames; only those not zero); absent where none was.
	TracerDropped map[string]int64 `json:"tracer_dropped,omitempty"`
}

// jain is Jain's fairness index of xs: (Σx)² / (n Σx²).
func jain(xs []float64) float64 {
	if len(xs) < 2 {
		return 1
	}
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// fairness fills JainIndex and JainVMs from the VMs' figures.
func (r *Result) fairness() {
	var xs []float64
	r.JainVMs = []string{}
	for _, v := range r.VMs {
		if v.Demand > v.FairShare+1e-9 {
			xs = append(xs, float64(v.TrueGPUNs)/float64(v.Weight))
			r.JainVMs = append(r.JainVMs, v.Name)
		}
	}
	r.JainIndex = jain(xs)
}

// errorMax fills AccountingErrorMax and EstimateErrorMax.
func (r *Result) errorMax() {
	r.AccountingErrorMax = worstOf(r.VMs, func(v VMResult) *float64 { return v.AccountingError })
	r.EstimateErrorMax = worstOf(r.VMs, func(v VMResult) *float64 { return v.EstimateError })
}

// worstOf is the largest |f(v)| over the VMs where f(v) is not nil.
func worstOf(vms []VMResult, f func(VMResult) *float64) *float64 {
	var worst *float64
	for _, v := range vms {
		if e := f(v); e != nil && (worst == nil || math.Abs(*e) > *worst) {
			a := math.Abs(*e)
			worst = &a
		}
	}
	return worst
}

// WriteText writes r as a human-readable summary and table.
func WriteText(w io.Writer, r *Result) error {
	var b strings.Builder
	name := r.Spec
	if name == "" {
		name = "spec"
	}
	fmt.Fprintf(&b, "%s: accounting %s, policy %s, clock %s, %s measured (run took %s)\n",
		name, r.Accounting, r.Policy, r.Clock, ms(r.DurationNs), ms(r.WallNs))
	fmt.Fprintf(&b, "GPU busy %s (utilization %.2f%%), %d kernels, Jain %.4f over %d VMs",
		ms(r.GPUBusyNs), 100*r.Utilization, r.Kernels, r.JainIndex, len(r.JainVMs))
	if r.AccountingErrorMax != nil {
		fmt.Fprintf(&b, ", accounting error max %.3f%%", 100**r.AccountingErrorMax)
	}
	if r.EstimateErrorMax != nil {
		fmt.Fprintf(&b, ", estimate error max %.3f%%", 100**r.EstimateErrorMax)
	}
	fmt.Fprintf(&b, "\nGPU overhead %s (no VM's kernel running: switches, gaps, idle)", ms(r.GPUOverheadNs))
	if r.SwitchOverheadFraction > 0 {
		fmt.Fprintf(&b, ", of which billed to no VM as context switches %s (%.2f%% of the time VMs overlapped)", ms(r.SwitchOverheadNs), 100*r.SwitchOverheadFraction)
	}
	fmt.Fprintf(&b, "\npoller CPU %s (%.3f%% of a core), %d periods", ms(r.PollerCPUNs), 100*r.PollerCPUFraction, r.Periods)
	if r.SamplingNs > 0 {
		fmt.Fprintf(&b, ", sampling %s", ms(r.SamplingNs))
	}
	switch r.Arbitration {
	case "turns":
		b.WriteString("\narbitration turns")
	case "auto":
		fmt.Fprintf(&b, "\narbitration auto: %s at the end, %d switches, %d periods under turns",
			r.ArbitrationInForce, deref(r.ArbitrationSwitches), deref(r.TurnsPeriods))
	}
	b.WriteString("\n\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "VM\tKIND\tWEIGHT\tTRUE\tACCOUNTED\tERROR\tESTIMATED\tERROR\tSHARE\tKERNELS\tTURNAROUND\tP99 LATENCY\tOLDEST WAIT\tHELD\t")
	for _, v := range r.VMs {
		turn := "-"
		if v.TurnaroundNs > 0 {
			turn = ms(v.TurnaroundNs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%.2f%%\t%d\t%s\t%s\t%s\t%s\t\n", v.Name, v.Kind, v.Weight,
			ms(v.TrueGPUNs), ms(v.AccountedGPUNs), pctOrDash(v.AccountingError), ms(v.EstimatedGPUNs),
			pctOrDash(v.EstimateError), 100*v.Share, v.Kernels, turn, ms(v.LatencyP99Ns), ms(v.OldestWaitNs), ms(v.HeldBackNs))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeNative(w, r); err != nil {
		return err
	}
	return writeInterleaved(w, r)
}

func pctOrDash(e *float64) string {
	if e == nil {
		return "-"
	}
	return fmt.Sprintf("%+.3f%%", 100**e)
}

func ms(ns int64) string { return fmt.Sprintf("%.3fms", float64(ns)/1e6) }

// deref is *p, 0 for nil.
func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}
