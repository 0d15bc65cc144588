package spec

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// ErrInvalid is matched (errors.Is) by every error that Parse, Load, Validate and Marshal return for a bad spec.
var ErrInvalid = errors.New("invalid benchmark spec")

// FieldError is one problem with a spec: the key path it concerns and, for parsed specs, the line.
type FieldError struct {
	Path string // e.g. vms[1].workload.kernel_us; empty for the spec as a whole
	Line int    // 1-based; 0 when unknown
	Msg  string
}

func (e *FieldError) Error() string {
	s := e.Msg
	if e.Path != "" {
		s = e.Path + ": " + s
	}
	if e.Line > 0 {
		s += fmt.Sprintf(" (line %d)", e.Line)
	}
	return s
}

// Error holds every problem found in a spec. It matches ErrInvalid.
type Error struct {
	Problems []*FieldError
}

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return ErrInvalid.Error() + ": " + e.Problems[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %d problems:", ErrInvalid, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n\t")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Is reports whether target is ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the problems, so errors.As finds a *FieldError.
func (e *Error) Unwrap() []error {
	out := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p
	}
	return out
}

// problems collects FieldErrors, at most one per path (a later one about the same key is a consequence of the
// first). lines maps the key paths present in the parsed document to their lines; it is nil for Validate.
type problems struct {
	list  []*FieldError
	seen  map[string]bool
	lines map[string]int
}

func newProblems(lines map[string]int) *problems {
	return &problems{seen: map[string]bool{}, lines: lines}
}

func (p *problems) addAt(path string, line int, format string, args ...any) {
	if !p.seen[path] {
		p.seen[path] = true
		p.report(path, line, format, args...)
	}
}

// report adds a problem even if path already has one, for problems that are not about the key's value.
func (p *problems) report(path string, line int, format string, args ...any) {
	p.list = append(p.list, &FieldError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (p *problems) add(path string, format string, args ...any) {
	p.addAt(path, p.line(path), format, args...)
}

// has reports whether path was present in the parsed document.
func (p *problems) has(path string) bool {
	_, ok := p.lines[path]
	return ok
}

// line returns the line of path or of its nearest present ancestor.
func (p *problems) line(path string) int {
	for path != "" {
		if l, ok := p.lines[path]; ok {
			return l
		}
		path = path[:max(strings.LastIndexAny(path, ".["), 0)]
	}
	return 0
}

func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	list := slices.Clone(p.list)
	if p.lines != nil {
		slices.SortStableFunc(list, func(a, b *FieldError) int { return a.Line - b.Line })
	}
	return &Error{Problems: list}
}

// Validate checks every field against the format in the package comment and reports all problems in one error
// that matches ErrInvalid. Zero values are not defaults here (see WithDefaults), except that cap 0 means none.
func (s Spec) Validate() error {
	p := newProblems(nil)
	s.check(p)
	return p.err()
}

func (s Spec) check(p *problems) {
	checkEnum(p, "backend", s.Backend, backends)
	checkEnum(p, "clock", s.Clock, clocks)
	checkEnum(p, "policy", s.Policy, policies)
	checkEnum(p, "accounting", s.Accounting, accountings)
	if s.Clock == ClockVirtual && s.Backend == BackendCUDA {
		p.add("clock", "virtual needs backend sim; use clock wall with backend cuda")
	}
	switch {
	case s.Duration != 0 || p.has("duration"):
		if s.Duration <= 0 || s.Duration > MaxDuration {
			p.add("duration", "must be positive and at most %s, got %s", MaxDuration, s.Duration)
		}
	case s.hasThrottle():
		p.add("duration", "required when any VM has a throttle workload (e.g. duration: 10s)")
	}
	switch {
	case len(s.VMs) == 0:
		p.add("vms", "at least one VM is required")
		return
	case len(s.VMs) > MaxVMs:
		p.add("vms", "%d VMs, at most %d", len(s.VMs), MaxVMs)
		return
	}
	s.Tuning.check(p, "tuning")
	if s.Tuning.SimTimeslice != 0 && s.Backend == BackendCUDA {
		p.add("tuning.sim_timeslice", "needs backend sim (a GPU time-slices as its driver does)")
	}
	for i, vm := range s.VMs {
		vm.check(p, fmt.Sprintf("vms[%d]", i))
	}
	s.checkNames(p)
}

func (vm VM) check(p *problems, path string) {
	if p.seen[path] {
		return // not a mapping: nothing below it was read
	}
	switch {
	case vm.Name == "" && !p.has(path+".name"):
		p.add(path+".name", "required")
	case !hostapi.ValidName(vm.Name):
		p.add(path+".name", "must match %s, got %s", hostapi.NameRE, quote(vm.Name))
	}
	checkRange(p, path+".weight", int64(vm.Weight), 1, MaxWeight)
	if vm.Cap != 0 || p.has(path+".cap") {
		if !(vm.Cap > 0 && vm.Cap <= 1) {
			p.add(path+".cap", "must be a number in (0, 1], got %v", vm.Cap)
		}
	}
	checkRange(p, path+".channels", int64(vm.Channels), 1, MaxChannels)
	checkRange(p, path+".count", int64(vm.Count), 1, MaxCount)
	vm.Workload.check(p, path+".workload")
}

func (w Workload) check(p *problems, path string) {
	if p.seen[path] {
		return
	}
	if w == (Workload{}) && !p.has(path) {
		p.add(path, "required")
		return
	}
	checkEnum(p, path+".kind", w.Kind, kinds)
	if w.KernelUS == 0 && !p.has(path+".kernel_us") {
		p.add(path+".kernel_us", "required, an integer from 1 to %d", MaxKernelUS)
	} else {
		checkRange(p, path+".kernel_us", w.KernelUS, 1, MaxKernelUS)
	}
	checkRange(p, path+".sleep_us", w.SleepUS, 0, MaxSleepUS)
	w.checkTiming(p, path)
	switch w.Kind {
	case KindThrottle:
		if w.Kernels != 0 || p.has(path+".kernels") {
			p.add(path+".kernels", "kernels applies to kind app (a throttle workload runs until duration)")
		}
	case KindApp:
		if w.Kernels == 0 && !p.has(path+".kernels") {
			p.add(path+".kernels", "required for kind app, an integer from 1 to %d", MaxKernels)
		} else {
			checkRange(p, path+".kernels", w.Kernels, 1, MaxKernels)
		}
	}
}

// checkTiming checks the optional keys depth, start, on and off.
func (w Workload) checkTiming(p *problems, path string) {
	if w.Depth != 0 || p.has(path+".depth") {
		checkRange(p, path+".depth", int64(w.Depth), 1, MaxDepth)
	}
	if w.Start < 0 || w.Start > MaxDuration {
		p.add(path+".start", "must be from 0 to %s, got %s", MaxDuration, w.Start)
	}
	on, off := w.On != 0 || p.has(path+".on"), w.Off != 0 || p.has(path+".off")
	switch {
	case on != off && on:
		p.add(path+".off", "required with on (a bursty workload needs both)")
	case on != off:
		p.add(path+".on", "required with off (a bursty workload needs both)")
	case on:
		for _, f := range []struct {
			key string
			v   time.Duration
		}{{"on", w.On}, {"off", w.Off}} {
			if f.v <= 0 || f.v > MaxDuration {
				p.add(path+"."+f.key, "must be positive and at most %s, got %s", MaxDuration, f.v)
			}
		}
	}
}

func (t Tuning) check(p *problems, path string) {
	if r := t.PollRatio; (r != 0 || p.has(path+".poll_ratio")) && r != -1 && !(r > 0 && r <= MaxRatio) {
		p.add(path+".poll_ratio", "must be -1 (poll all the time) or a number in (0, %d], got %v", MaxRatio, r)
	}
	if f := t.IdleFactor; (f != 0 || p.has(path+".idle_factor")) && !(f >= 1 && f <= MaxRatio) {
		p.add(path+".idle_factor", "must be a number in [1, %d], got %v", MaxRatio, f)
	}
	if w := t.NeonWindow; (w != 0 || p.has(path+".neon_window")) && !(w > 0 && w <= MaxWindow) {
		p.add(path+".neon_window", "must be positive and at most %s, got %s", MaxWindow, w)
	}
	if w := t.Window; (w != 0 || p.has(path+".window")) && w != -1 && !(w >= 1 && w <= MaxWindowRecords) {
		p.add(path+".window", "must be -1 (no bound) or an integer from 1 to %d, got %d", MaxWindowRecords, w)
	}
	if b := t.InflightBudget; (b == 0 && p.has(path+".inflight_budget")) || b > MaxBudget {
		p.add(path+".inflight_budget", "must be negative (no bound) or a duration in (0, %s], got %s", MaxBudget, b)
	}
	if a := t.Arbitration; (a != "" || p.has(path+".arbitration")) && a != "driver" && a != "turns" && a != "auto" {
		p.add(path+".arbitration", "must be driver, turns or auto, got %q", a)
	}
	if q := t.Quantum; (q != 0 || p.has(path+".quantum")) && !(q > 0 && q <= MaxQuantum) {
		p.add(path+".quantum", "must be positive and at most %s, got %s", MaxQuantum, q)
	}
	if h := t.Handoff; (h == 0 && p.has(path+".handoff")) || h > MaxHandoff {
		p.add(path+".handoff", "must be negative (off) or a duration in (0, %s], got %s", MaxHandoff, h)
	}
	if d := t.SimTimeslice; (d != 0 || p.has(path+".sim_timeslice")) && !(d > 0 && d <= MaxSimTimeslice) {
		p.add(path+".sim_timeslice", "must be positive and at most %s, got %s", MaxSimTimeslice, d)
	}
	if r := t.NeonFreerunRatio; (r != 0 || p.has(path+".neon_freerun_ratio")) && !(r > 0 && r <= MaxRatio) {
		p.add(path+".neon_freerun_ratio", "must be a number in (0, %d], got %v", MaxRatio, r)
	}
}

// checkNames checks that names are unique after count expansion.
func (s Spec) checkNames(p *problems) {
	total := 0
	for _, vm := range s.VMs {
		total += min(max(vm.Count, 1), MaxCount)
	}
	if total > MaxVMs {
		p.add("vms", "%d VMs after expanding count, at most %d", total, MaxVMs)
		return
	}
	owner := make(map[string]int, total)
	for i, vm := range s.VMs {
		if vm.Name == "" {
			continue // already reported
		}
		names := []string{vm.Name}
		if n := min(vm.Count, MaxCount); n > 1 {
			names = names[:0]
			for k := range n {
				names = append(names, expandedName(vm.Name, k))
			}
		}
		for _, name := range names {
			if j, ok := owner[name]; ok {
				p.add(fmt.Sprintf("vms[%d].name", i), "name %s%s is also the name of %s",
					quote(name), s.countNote(i), s.describe(j))
				break
			}
			owner[name] = i
		}
	}
}

func (s Spec) countNote(i int) string {
	if s.VMs[i].Count > 1 {
		return fmt.Sprintf(" (from count %d)", s.VMs[i].Count)
	}
	return ""
}

func (s Spec) describe(i int) string {
	if vm := s.VMs[i]; vm.Count > 1 {
		return fmt.Sprintf("vms[%d] (%s with count %d)", i, quote(vm.Name), vm.Count)
	}
	return fmt.Sprintf("vms[%d]", i)
}

func checkEnum[T ~string](p *problems, path string, v T, allowed []T) {
	if slices.Contains(allowed, v) {
		return
	}
	list := make([]string, len(allowed))
	for i, a := range allowed {
		list[i] = string(a)
	}
	if v == "" && !p.has(path) {
		p.add(path, "required, one of %s", strings.Join(list, ", "))
		return
	}
	p.add(path, "must be one of %s, got %s", strings.Join(list, ", "), quote(string(v)))
}

func checkRange(p *problems, path string, v, lo, hi int64) {
	if v < lo || v > hi {
		p.add(path, "must be an integer from %d to %d, got %d", lo, hi, v)
	}
}

// quote quotes s for a message, shortened so a hostile spec cannot flood the error.
func quote(s string) string {
	const maxLen = 64
	if len(s) > maxLen {
		s = s[:maxLen] + "…"
	}
	return fmt.Sprintf("%q", s)
}
