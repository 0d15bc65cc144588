package cuda

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// The switch overhead: where several VMs' contexts have work on the GPU at
// once, the GPU time-slices between them, and the switches between
// contexts are in the time the completer's sweeps see as "something ran".
// Its fraction f of such stretches is billed to nobody (credit) and
// counted apart (SwitchOverhead). f is an operator's figure (the option
// switch_overhead) or, by default ("auto"), measured once when the backend
// opens (calibrate): two probe VMs each run one spinning THROTTLE kernel at
// the same time, and f is the part of the union of their spans in which
// neither kernel ran, by their own %globaltimer (the steps longer than the
// gap, when a context was switched out). It assumes the probes have the
// GPU to themselves: other contexts busy meanwhile (another process's, a
// predecessor's kept workers) inflate it, and an operator sets it there.

// Calibration's bounds.
const (
	// probeNs is each probe kernel's length: some tens of time slices
	// (about 2 ms each on an H100), few enough to keep the start short.
	probeNs = 30_000_000
	// probeWait bounds the whole calibration: the probes' workers' start
	// and their kernels. Past it, f is 0 and the backend opens anyway.
	probeWait = 3 * time.Second
	// maxSwitchOverhead bounds f, measured or set: past it the estimate is
	// nonsense (a probe stalled, a third context on the GPU).
	maxSwitchOverhead = 0.5
)

// probeIDs are the IDs of the calibration's two VMs, which live only
// while Open runs, before any VM of the caller's can attach.
var probeIDs = [2]uint32{math.MaxUint32 - 1, math.MaxUint32}

// errProbe is a calibration that measured nothing usable.
var errProbe = errors.New("switch overhead probe")

// parseSwitchOverhead reads the option switch_overhead: "auto" (measure it
// at start) or a fraction in [0, maxSwitchOverhead).
func parseSwitchOverhead(v string) (f float64, auto bool, err error) {
	if v == "auto" {
		return 0, true, nil
	}
	f, err = strconv.ParseFloat(v, 64)
	if err == nil && (f < 0 || f >= maxSwitchOverhead || math.IsNaN(f)) {
		err = fmt.Errorf("must be auto or a fraction in [0, %g)", maxSwitchOverhead)
	}
	return f, false, err
}

// switchOverheadOf is f from the probe kernels' own records: 1 less the
// sum of their running time over the union of their spans (which, for
// kernels that overlap, is their common span's ends). Kernels that did not
// overlap measured no switching: an error.
func switchOverheadOf(probes []truthIval) (float64, error) {
	if len(probes) < 2 {
		return 0, fmt.Errorf("%w: %d records, want 2", errProbe, len(probes))
	}
	first, last := probes[0].first, probes[0].last
	lateStart, earlyEnd := first, last
	var ran int64
	for _, p := range probes {
		if p.last <= p.first || p.ran <= 0 || p.ran > p.last-p.first {
			return 0, fmt.Errorf("%w: a record of [%d, %d] that ran %d ns", errProbe, p.first, p.last, p.ran)
		}
		first, last = min(first, p.first), max(last, p.last)
		lateStart, earlyEnd = max(lateStart, p.first), min(earlyEnd, p.last)
		ran += p.ran
	}
	if lateStart >= earlyEnd {
		return 0, fmt.Errorf("%w: the probe kernels did not run at once", errProbe)
	}
	f := 1 - float64(ran)/float64(last-first)
	if f < 0 {
		f = 0 // rounding of the kernels' steps: no switch cost measured
	}
	if f >= maxSwitchOverhead {
		return 0, fmt.Errorf("%w: %.3f of the probes' span was nobody's", errProbe, f)
	}
	return f, nil
}

// calibrate measures f (measureSwitchOverhead) and uses it; on any failure
// it warns and uses 0, the bills as without it. The backend opens either way.
func (b *Backend) calibrate() {
	start := time.Now()
	f, err := b.measureSwitchOverhead(probeNs, probeWait)
	if err != nil {
		slog.Warn("cuda: measuring the context switch overhead; billing without it (set switch_overhead to override)", "err", err)
		f = 0
	} else {
		slog.Info("cuda: context switch overhead measured", "fraction", f, "took", time.Since(start))
	}
	b.setSwitchOverhead(f)
}

// measureSwitchOverhead attaches the two probe VMs, runs a THROTTLE of ns
// on each at once and computes f from their records. It gives up after
// wait; a probe still starting then is closed when its Attach returns.
func (b *Backend) measureSwitchOverhead(ns uint64, wait time.Duration) (float64, error) {
	type probe struct {
		vm  backend.VM
		err error
	}
	done := make(chan backend.Completion, 2)
	attached := make(chan probe, 2)
	for _, id := range probeIDs {
		go func() {
			vm, err := b.Attach(backend.VMSpec{ID: id, Name: "switch-overhead-probe", Channels: 1, MaxInFlight: 1,
				Complete: func(c backend.Completion) { done <- c }})
			attached <- probe{vm, err}
		}()
	}
	timeout := time.After(wait)
	var vms []*cudaVM
	defer func() {
		for _, v := range vms {
			_ = v.Close()
		}
	}()
	var first error
	for pending := len(probeIDs); pending > 0; pending-- {
		select {
		case p := <-attached:
			switch {
			case p.err != nil && first == nil:
				first = p.err
			case p.err == nil:
				vms = append(vms, p.vm.(*cudaVM))
			}
		case <-timeout:
			go func(n int) { // close the late ones when they come
				for range n {
					if p := <-attached; p.err == nil {
						_ = p.vm.Close()
					}
				}
			}(pending)
			return 0, fmt.Errorf("%w: the probe VMs took longer than %v to start", errProbe, wait)
		}
	}
	if first != nil {
		return 0, fmt.Errorf("starting the probe VMs: %w", first)
	}
	for _, v := range vms {
		v.truth.keep.Store(true) // the probes' records are the measure, KeepGroundTruth or not
		if err := v.Submit(0, abi.Command{Op: abi.OpThrottle, DurationNs: ns}, 0); err != nil {
			return 0, fmt.Errorf("submitting a probe kernel: %w", err)
		}
	}
	for range vms {
		select {
		case c := <-done:
			if c.Code != abi.OK {
				return 0, fmt.Errorf("%w: a probe kernel failed: %v", errProbe, c.Code)
			}
		case <-timeout:
			return 0, fmt.Errorf("%w: the probe kernels took longer than %v", errProbe, wait)
		}
	}
	var probes []truthIval
	for _, v := range vms {
		v.truth.mu.Lock()
		probes = append(probes, v.truth.ivals...)
		v.truth.mu.Unlock()
	}
	return switchOverheadOf(probes)
}

// setSwitchOverhead sets f for credit.
func (b *Backend) setSwitchOverhead(f float64) { b.switchF.Store(math.Float64bits(f)) }

// SwitchOverhead is the GPU time billed to no VM as context switching
// (credit: what the tracers' counts left of the stretches in which several
// VMs ran at once, or f of each where they did not count) since Open, and
// f as measured at Open or set by the option switch_overhead (credit uses
// the tracers' measure of it once they have one, overheadFraction). f is
// the switch cost of the probe's small context, not of every kernel's
// state.
func (b *Backend) SwitchOverhead() (ns int64, fraction float64) {
	return b.switchNs.Load(), math.Float64frombits(b.switchF.Load())
}
