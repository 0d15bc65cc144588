package main

import (
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/sluice-gpu/sluice/mediator/bench"
)

// judged is a target line with its verdict.
func judged(what, goal, measured string, met bool) target {
	return target{what: what, goal: goal, measured: measured, met: met}
}

// target is one line of the done-when table.
type target struct {
	what, goal, measured string
	met                  bool
	info                 bool // reported, not judged
}

var (
	accuracyName = regexp.MustCompile(`^(kernel-length-[0-9]+us|load-[0-9]+pct)$`)
	sampledName  = regexp.MustCompile(`^(kernel-length|load)-.*-sampled$`)
)

// writeTargets checks the standard specs present against the issue's
// done-when targets (docs/architecture.md, "Goals the measurements are held to").
func writeTargets(b *strings.Builder, rs []*bench.Result) {
	by := map[string]*bench.Result{}
	for _, r := range rs {
		by[r.Spec] = r
	}
	var ts []target
	ts = append(ts, overheadTargets(rs, by)...)
	if r := by["poller-cpu-wall"]; r != nil {
		ts = append(ts, judged(fmt.Sprintf("poller CPU, %d VMs, thread CPU time in real time (wall clock)", len(r.VMs)),
			"≤ 2% of a core", fmt.Sprintf("%.3f%% over %.1f s", 100*r.PollerCPUFraction, float64(r.DurationNs)/1e9),
			r.PollerCPUFraction <= 0.02))
	}
	ts = append(ts, accuracyTargets(rs)...)
	ts = append(ts, fairnessTargets(by)...)
	if len(ts) == 0 {
		return
	}
	b.WriteString("\n## Against the targets\n\n| target | goal | measured | met |\n| --- | --- | --- | --- |\n")
	for _, t := range ts {
		met := "no"
		switch {
		case t.info:
			met = "—"
		case t.met:
			met = "yes"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", t.what, t.goal, t.measured, met)
	}
}

func overheadTargets(rs []*bench.Result, by map[string]*bench.Result) []target {
	var ts []target
	for _, r := range rs {
		m := overheadName.FindStringSubmatch(r.Spec)
		if m == nil || m[2] != "loga" || by["overhead-"+m[1]+"-off"] == nil {
			continue
		}
		off := appTurnaround(by["overhead-"+m[1]+"-off"])
		loga := appTurnaround(r)
		if off <= 0 || loga <= 0 {
			continue
		}
		d := float64(loga)/float64(off) - 1
		pairs := []float64{d}
		for i := 2; ; i++ {
			o, l := by[fmt.Sprintf("overhead-%s-off-r%d", m[1], i)], by[fmt.Sprintf("overhead-%s-loga-r%d", m[1], i)]
			if o == nil || l == nil || appTurnaround(o) <= 0 {
				break
			}
			pairs = append(pairs, float64(appTurnaround(l))/float64(appTurnaround(o))-1)
		}
		if len(pairs) == 1 {
			ts = append(ts, judged("overhead "+m[1]+": app turnaround, loga vs off", "≤ 0.5%",
				fmt.Sprintf("%+.3f%%", 100*d), math.Abs(d) <= 0.005))
		} else {
			// On a real GPU one pair is within run-to-run noise: judge the
			// mean of the interleaved pairs, and show each.
			var sum, sq float64
			parts := make([]string, len(pairs))
			for i, p := range pairs {
				sum += p
				parts[i] = fmt.Sprintf("%+.2f%%", 100*p)
			}
			mean := sum / float64(len(pairs))
			for _, p := range pairs {
				sq += (p - mean) * (p - mean)
			}
			se := math.Sqrt(sq/float64(len(pairs)-1)) / math.Sqrt(float64(len(pairs)))
			ts = append(ts, judged(fmt.Sprintf("overhead %s: app turnaround, loga vs off, mean of %d interleaved pairs", m[1], len(pairs)),
				"≤ 0.5%", fmt.Sprintf("%+.3f%% ± %.3f%% (standard error; pairs %s)", 100*mean, 100*se, strings.Join(parts, ", ")),
				math.Abs(mean) <= 0.005))
		}
		ts = append(ts, judged("poller CPU, "+m[1]+" (11 VMs)", "≤ 2% of a core",
			fmt.Sprintf("%.3f%%", 100*r.PollerCPUFraction), r.PollerCPUFraction <= 0.02))
	}
	return ts
}

// onGPU reports whether r ran on a real GPU, where the targets of issue 5
// apply (within 2% of the kernels' %globaltimer ground truth).
func onGPU(r *bench.Result) bool { return r.Backend == "cuda" }

func accuracyTargets(rs []*bench.Result) []target {
	var ts []target
	tol, gpu := 0.01, false
	for _, r := range rs {
		if onGPU(r) {
			tol, gpu = 0.02, true
		}
	}
	worst, worstSpec, n := 0.0, "", 0
	for _, r := range rs {
		if !accuracyName.MatchString(r.Spec) || r.EstimateErrorMax == nil {
			continue
		}
		n++
		if *r.EstimateErrorMax >= worst {
			worst, worstSpec = *r.EstimateErrorMax, r.Spec
		}
	}
	if n > 0 {
		what := fmt.Sprintf("kernel length and load measured by polling, %d specs (polling all the time)", n)
		if gpu {
			what += ", against the kernels' %globaltimer time"
		}
		ts = append(ts, judged(what, fmt.Sprintf("within %.0f%%", 100*tol),
			fmt.Sprintf("worst %.4f%% (%s)", 100*worst, worstSpec), worst <= tol))
	}
	for _, r := range rs {
		if sampledName.MatchString(r.Spec) && r.EstimateErrorMax != nil {
			ts = append(ts, judged(r.Spec+" measured by polling (default sampling)", "within 1%",
				fmt.Sprintf("%.3f%% over %d periods", 100**r.EstimateErrorMax, r.Periods), *r.EstimateErrorMax <= 0.01))
		}
	}
	ts = append(ts, worstTarget(rs, "accounted vs true per VM (loga: exact meter)", "within 1%",
		func(r *bench.Result) *float64 {
			if r.Accounting == "neon-sampling" || r.Clock == "wall" {
				return nil
			}
			return r.AccountingErrorMax
		}, true)...)
	if gpu {
		ts = append(ts, worstTarget(rs, "billed GPU time vs the kernels' own time per VM (GPU)", "reported",
			func(r *bench.Result) *float64 {
				if !onGPU(r) || r.Accounting == "off" {
					return nil
				}
				return r.AccountingErrorMax
			}, false)...)
	}
	ts = append(ts, worstTarget(rs, "sampling estimate vs true per VM (loga, scheduling input)", "reported",
		func(r *bench.Result) *float64 {
			if r.Accounting != "loga" || r.Clock == "wall" {
				return nil
			}
			return r.EstimateErrorMax
		}, false)...)
	return ts
}

// worstTarget is the worst of f over the runs where it is not nil; with
// check false the line is reported, not judged.
func worstTarget(rs []*bench.Result, what, goal string, f func(*bench.Result) *float64, check bool) []target {
	worst, worstSpec, n := 0.0, "", 0
	for _, r := range rs { // virtual-clock runs: the wall clock is for the poller's CPU, a real thread
		e := f(r)
		if e == nil {
			continue
		}
		n++
		if *e >= worst {
			worst, worstSpec = *e, r.Spec
		}
	}
	if n == 0 {
		return nil
	}
	t := judged(fmt.Sprintf("%s, %d specs", what, n), goal, fmt.Sprintf("worst %.2f%% (%s)", 100*worst, worstSpec), worst <= 0.01)
	if !check {
		t.info = true
		if !strings.Contains(what, "GPU") {
			t.measured += " (polling 1.9% of the time: the error shrinks as 1/√periods)"
		}
	}
	return []target{t}
}

func fairnessTargets(by map[string]*bench.Result) []target {
	var ts []target
	for _, name := range []string{"skew-dfq", "skew-neon-dfq"} {
		if r := by[name]; r != nil {
			ts = append(ts, judged(name+": equal weights, 10× kernel skew", "Jain ≥ 0.99",
				fmt.Sprintf("%.4f", r.JainIndex), r.JainIndex >= 0.99))
		}
	}
	if r := by["weights-dfq"]; r != nil {
		ts = append(ts, weightTarget(r))
	}
	if r := by["hog-dfq"]; r != nil {
		ts = append(ts, hogTarget(r))
	}
	if d, n := by["nooveruse-dfq"], by["nooveruse-none"]; d != nil && n != nil && n.Utilization > 0 {
		loss := 1 - d.Utilization/n.Utilization
		ts = append(ts, judged("throughput loss, dfq vs none, nobody over-uses", "≤ 1%",
			fmt.Sprintf("%.3f%%", 100*loss), loss <= 0.01))
	}
	return ts
}

// weightTarget compares each VM's share with weight / Σ weights.
func weightTarget(r *bench.Result) target {
	var sum float64
	for _, v := range r.VMs {
		sum += float64(v.Weight)
	}
	worst := 0.0
	var parts []string
	for _, v := range r.VMs {
		want := float64(v.Weight) / sum
		worst = max(worst, math.Abs(v.Share-want))
		parts = append(parts, fmt.Sprintf("%s %.1f%% (target %.1f%%)", v.Name, 100*v.Share, 100*want))
	}
	return judged("weights-dfq: shares 1:2:4", "each within 3 points", strings.Join(parts, ", "), worst <= 0.03)
}

// hogTarget is the time from the hog's arrival to its first hold, in
// periods. Under turns dfq's holds of a VM running ahead do not bind (the
// turn picker shares the GPU: gate.Gate.ApplyAhead): a hog never held
// there is judged by its share, at most its fair share and 5 points.
func hogTarget(r *bench.Result) target {
	for _, v := range r.VMs {
		if v.Name != "hog" {
			continue
		}
		turns := r.Arbitration == "turns" || r.Arbitration == "auto" && r.TurnsPeriods != nil && *r.TurnsPeriods > 0
		if v.FirstHeldNs == nil && turns {
			fair := 1 / float64(len(r.VMs))
			return judged("hog-dfq: hog held back", fmt.Sprintf("≤ 1 period (under turns: share ≤ %.0f%%)", 100*(fair+0.05)),
				fmt.Sprintf("never held: turns shared the GPU, share %.1f%%", 100*v.Share), v.Share <= fair+0.05)
		}
		if v.FirstHeldNs == nil || r.MeanPeriodNs <= 0 {
			return target{what: "hog-dfq: hog held back", goal: "≤ 1 period", measured: "never held"}
		}
		periods := float64(*v.FirstHeldNs-v.StartNs) / float64(r.MeanPeriodNs)
		return judged("hog-dfq: hog held back", "≤ 1 period",
			fmt.Sprintf("%.2f periods (%.1f ms after arriving, period %.1f ms)", periods,
				float64(*v.FirstHeldNs-v.StartNs)/1e6, float64(r.MeanPeriodNs)/1e6), periods <= 1)
	}
	return target{what: "hog-dfq: hog held back", goal: "≤ 1 period", measured: "no VM named hog"}
}
