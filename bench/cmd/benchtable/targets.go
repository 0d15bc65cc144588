package main

import (
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/sluice-gpu/sluice/mediator/bench"
)

// target is one line of the done-when table.
type target struct {
	what, goal, measured string
	met                  bool
}

var (
	accuracyName = regexp.MustCompile(`^(kernel-length-[0-9]+us|load-[0-9]+pct)$`)
	sampledName  = regexp.MustCompile(`^(kernel-length|load)-.*-sampled$`)
)

// writeTargets checks the standard specs present against the issue's
// done-when targets (DESIGN.md §4).
func writeTargets(b *strings.Builder, rs []*bench.Result) {
	by := map[string]*bench.Result{}
	for _, r := range rs {
		by[r.Spec] = r
	}
	var ts []target
	ts = append(ts, overheadTargets(rs, by)...)
	ts = append(ts, accuracyTargets(rs)...)
	ts = append(ts, fairnessTargets(by)...)
	if len(ts) == 0 {
		return
	}
	b.WriteString("\n## Against the targets\n\n| target | goal | measured | met |\n| --- | --- | --- | --- |\n")
	for _, t := range ts {
		met := "no"
		if t.met {
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
		ts = append(ts, target{"overhead " + m[1] + ": app turnaround, loga vs off", "≤ 0.5%",
			fmt.Sprintf("%+.3f%%", 100*d), math.Abs(d) <= 0.005})
		ts = append(ts, target{"poller CPU, " + m[1] + " (11 VMs)", "≤ 2% of a core",
			fmt.Sprintf("%.3f%%", 100*r.PollerCPUFraction), r.PollerCPUFraction <= 0.02})
	}
	return ts
}

func accuracyTargets(rs []*bench.Result) []target {
	var ts []target
	worst, worstSpec, n := 0.0, "", 0
	for _, r := range rs {
		if !accuracyName.MatchString(r.Spec) || r.AccountingErrorMax == nil {
			continue
		}
		n++
		if *r.AccountingErrorMax >= worst {
			worst, worstSpec = *r.AccountingErrorMax, r.Spec
		}
	}
	if n > 0 {
		ts = append(ts, target{fmt.Sprintf("kernel length and load, %d specs (polling all the time)", n), "within 1%",
			fmt.Sprintf("worst %.4f%% (%s)", 100*worst, worstSpec), worst <= 0.01})
	}
	for _, r := range rs {
		if sampledName.MatchString(r.Spec) && r.AccountingErrorMax != nil {
			ts = append(ts, target{r.Spec + " (default sampling)", "within 1%",
				fmt.Sprintf("%.3f%%", 100**r.AccountingErrorMax), *r.AccountingErrorMax <= 0.01})
		}
	}
	// Per-VM accounted vs true over every run with accounting on.
	worst, worstSpec, n = 0, "", 0
	for _, r := range rs {
		if r.AccountingErrorMax == nil {
			continue
		}
		n++
		if *r.AccountingErrorMax >= worst {
			worst, worstSpec = *r.AccountingErrorMax, r.Spec
		}
	}
	if n > 0 {
		ts = append(ts, target{fmt.Sprintf("accounted vs true per VM, all %d specs with accounting", n), "within 1%",
			fmt.Sprintf("worst %.2f%% (%s)", 100*worst, worstSpec), worst <= 0.01})
	}
	return ts
}

func fairnessTargets(by map[string]*bench.Result) []target {
	var ts []target
	for _, name := range []string{"skew-dfq", "skew-neon-dfq"} {
		if r := by[name]; r != nil {
			ts = append(ts, target{name + ": equal weights, 10× kernel skew", "Jain ≥ 0.99",
				fmt.Sprintf("%.4f", r.JainIndex), r.JainIndex >= 0.99})
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
		ts = append(ts, target{"throughput loss, dfq vs none, nobody over-uses", "≤ 1%",
			fmt.Sprintf("%.3f%%", 100*loss), loss <= 0.01})
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
	return target{"weights-dfq: shares 1:2:4", "each within 3 points", strings.Join(parts, ", "), worst <= 0.03}
}

// hogTarget is the time from the hog's arrival to its first hold, in
// periods.
func hogTarget(r *bench.Result) target {
	for _, v := range r.VMs {
		if v.Name != "hog" {
			continue
		}
		if v.FirstHeldNs == nil || r.MeanPeriodNs <= 0 {
			return target{"hog-dfq: hog held back", "≤ 1 period", "never held", false}
		}
		periods := float64(*v.FirstHeldNs-v.StartNs) / float64(r.MeanPeriodNs)
		return target{"hog-dfq: hog held back", "≤ 1 period",
			fmt.Sprintf("%.2f periods (%.1f ms after arriving, period %.1f ms)", periods,
				float64(*v.FirstHeldNs-v.StartNs)/1e6, float64(r.MeanPeriodNs)/1e6), periods <= 1}
	}
	return target{"hog-dfq: hog held back", "≤ 1 period", "no VM named hog", false}
}
