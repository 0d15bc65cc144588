// Package bench owns Sluice's benchmark runner: it runs a workload spec
// (mediator/bench/spec) in-process on the simulated GPU and measures it
// (docs/architecture.md, "The benchmark harness"). `sluicectl bench run SPEC` is its front end.
//
// Each VM gets a region of plain memory laid out as a real one (abi), the
// host side of its channels (internal/channel) forwarding to its context on
// the sim, and a guest workload that drives the channels as a guest does:
// records into the ring, put, doorbell, and completions read back from get.
// Accounting runs as it would in the mediator: "loga" and
// "loga-segment-average" are the accounting poller feeding the engine
// (scheduler and gate), "neon-sampling" is NEON's sampling controller
// (mediator/bench/neon) feeding the same scheduler, and "off" has neither.
//
// With clock virtual the sim runs in manual drive from Run's goroutine:
// every callback happens on one goroutine and the run is deterministic
// (the same spec gives the same Result except wall_ns and estimator_ns).
// With clock wall the sim's own goroutine drives a real-time timeline and the
// poller spins on a thread of its own; that is for demos, not measurements.
//
// The measured stretch is [0, W], W being the spec's duration or, if later,
// the completion of the last app VM's last kernel: throttle workloads stop
// submitting at the duration, and every figure is taken at W on the
// timeline. Accounting's charges are summed over [0, W] (a period
// straddling W counts in proportion), after running on until accounting has
// reported the period that covers W. A period charges the poll phase's
// sample back over the stretch before it, so when W is the duration the
// throttle workloads keep their pace after W until the run closes: the
// straddling period's sample then sees the workload it charges for (what
// runs after W is not measured).
//
// On a GPU (backend cuda) Run then runs the native baseline (native.go,
// cuda.RunNative): the same kernels launched by one process straight
// through the driver API, and puts it beside Sluice's figures.
package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/backend/cuda"
	"github.com/sluice-gpu/sluice/mediator/backend/sim"
	"github.com/sluice-gpu/sluice/mediator/bench/spec"
	"github.com/sluice-gpu/sluice/mediator/internal/channel"
	"github.com/sluice-gpu/sluice/mediator/internal/gate"
)

// ErrUnsupported is matched by errors for specs this runner cannot run (a
// cuda backend, accounting off with a scheduling policy).
var ErrUnsupported = errors.New("unsupported benchmark")

// ErrStalled is matched when a run did not reach its end in the time the
// runner allows it (an app VM that never completes).
var ErrStalled = errors.New("benchmark stalled")

// Options are the runner's inputs beyond the spec.
type Options struct {
	Name string // the spec's name, copied into Result.Spec
	// NoNative leaves out the native baseline of a spec on a GPU (backend
	// cuda), which otherwise runs right after Sluice's run (Result.Native).
	NoNative bool
	// Rounds is how many times a spec on a GPU runs Sluice and the native
	// baseline, alternating which goes first (Result.Interleaved); 0 or 1:
	// once each, Sluice first.
	Rounds int
}

// chunkNs is how far the virtual timeline runs between context checks.
const chunkNs = 10_000_000

// runner is one run.
type runner struct {
	s        spec.Spec
	gpu      gpu
	t0       int64    // the run's start on the backend's clock (after setup)
	sim      *sim.Sim // the virtual clock's manual drive; nil on a real GPU
	hosts    []*host
	guests   []*guest
	ctl      control
	duration int64
	occ      *occupancy  // VMs with commands on the backend
	closing  atomic.Bool // the run is over: guests stop reacting
	overrun  atomic.Bool // the snapshot is taken at the duration: throttles go on

	mu       sync.Mutex // end state, set on the timeline, read by Run
	appsLeft int
	reached  bool // the timeline reached the duration
	ended    chan struct{}
	snap     *snapshot
}

// switchCounter is a backend that bills part of the time in which several
// VMs ran at once to none of them, as switching between their contexts
// (the cuda backend's SwitchOverhead): how much, and the fraction.
type switchCounter interface {
	SwitchOverhead() (ns int64, fraction float64)
}

// tracedCounter is a backend that bills intervals in which several VMs
// ran by what each VM's context ran of them, as its tracer counted (the
// cuda backend's TracedNs): how long such intervals lasted in all.
type tracedCounter interface {
	TracedNs() int64
}

// billKinder is a backend that says how it made a VM's bill (the cuda
// backend's BillKinds).
type billKinder interface {
	BillKinds(id uint32) (kinds [3]float64, count, outs uint64)
	TracerDropped(id uint32) [len(cuda.DropNames)]float64
}

// snapshot is every figure at W, taken on the timeline.
type snapshot struct {
	at         int64
	busy       []int64
	gpuBusy    int64
	switchNs   int64   // the backend's switch overhead (switchCounter)
	switchF    float64 // its fraction
	tracedNs   int64   // the backend's traced intervals (tracedCounter)
	billed     []int64
	kernels    []int64
	turnaround []int64
	latP50     []int64
	latP99     []int64
	oldest     []int64
	errs       []error
}

// Run runs s and returns what it measured. On a GPU (backend cuda) the
// native baseline runs beside it, unless o.NoNative: o.Rounds times each,
// interleaved (interleave).
func Run(ctx context.Context, s spec.Spec, o Options) (*Result, error) {
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.Backend != spec.BackendCUDA || o.NoNative {
		return runSluice(ctx, s, o)
	}
	return interleave(ctx, o.Rounds, sides{
		sluice: func(ctx context.Context) (*Result, error) { return runSluice(ctx, s, o) },
		native: func(ctx context.Context) (*cuda.NativeResult, error) { return cuda.RunNative(ctx, nativePlan(s)) },
	})
}

// runSluice runs s through Sluice's path: channels, gate, accounting.
func runSluice(ctx context.Context, s spec.Spec, o Options) (*Result, error) {
	t0 := time.Now()
	r, err := setup(s)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if s.Clock == spec.ClockWall {
		err = r.driveWall(ctx)
	} else {
		err = r.driveVirtual(ctx)
	}
	if err != nil {
		return nil, err
	}
	res, err := r.result(o)
	if err != nil {
		return nil, err
	}
	res.WallNs = int64(time.Since(t0))
	return res, nil
}

func setup(s spec.Spec) (*runner, error) {
	g, sm, err := openGPU(s)
	if err != nil {
		return nil, err
	}
	r := &runner{s: s, gpu: g, sim: sm, duration: int64(s.Duration), ended: make(chan struct{}), occ: &occupancy{}}
	window := uint32(channel.DefaultWindow)
	switch w := s.Tuning.Window; {
	case w < 0:
		window = 0
	case w > 0:
		window = uint32(w)
	}
	for i, vm := range s.Expand() {
		h, err := newHost(g, uint32(i+1), vm, window, r.occ)
		if err != nil {
			g.Close()
			return nil, err
		}
		r.hosts = append(r.hosts, h)
		gu := newGuest(h, r.after, r.now, r.duration, r.appFinished)
		gu.closing, gu.overrun = &r.closing, &r.overrun
		r.guests = append(r.guests, gu)
		if vm.Workload.Kind == spec.KindApp {
			r.appsLeft++
		}
	}
	if r.ctl, err = newControl(s, g, r.hosts); err != nil {
		g.Close()
		return nil, err
	}
	// The run's time starts now: on a real GPU, creating the contexts took
	// a while of the backend's clock.
	r.t0 = g.Clock().Now()
	g.After(r.duration, func() {
		r.mu.Lock()
		r.reached = true
		r.mu.Unlock()
		r.maybeEnd()
	})
	for _, g := range r.guests {
		g.start()
	}
	return r, nil
}

// now is the run's time: the backend's clock since t0.
func (r *runner) now() int64 { return r.gpu.Clock().Now() - r.t0 }

// after is the sim's After for guests: nothing runs once the run is over.
func (r *runner) after(delay int64, fn func()) {
	r.gpu.After(delay, func() {
		if !r.closing.Load() {
			fn()
		}
	})
}

func (r *runner) appFinished() {
	r.mu.Lock()
	r.appsLeft--
	r.mu.Unlock()
	r.maybeEnd()
}

// maybeEnd takes the snapshot once the duration has passed and every app
// has completed.
func (r *runner) maybeEnd() {
	r.mu.Lock()
	if !r.reached || r.appsLeft > 0 || r.snap != nil {
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	snap := r.takeSnapshot()
	if snap.at <= r.duration {
		r.overrun.Store(true)
	}
	r.ctl.snapshot(snap.at)
	r.mu.Lock()
	r.snap = snap
	close(r.ended)
	r.mu.Unlock()
}

func (r *runner) takeSnapshot() *snapshot {
	n := len(r.hosts)
	sn := &snapshot{
		at: r.gpu.Clock().Now(), busy: make([]int64, n), billed: make([]int64, n),
		kernels: make([]int64, n), turnaround: make([]int64, n), errs: make([]error, n),
		latP50: make([]int64, n), latP99: make([]int64, n), oldest: make([]int64, n),
	}
	sn.gpuBusy = r.gpu.Busy()
	if sc, ok := r.gpu.(switchCounter); ok {
		sn.switchNs, sn.switchF = sc.SwitchOverhead()
	}
	if tc, ok := r.gpu.(tracedCounter); ok {
		sn.tracedNs = tc.TracedNs()
	}
	// Commands running at W count from their start, as the exact meter
	// reads them from the backend's status, where the truth counts them.
	running := map[uint32]int64{}
	if r.gpu.truthHasRunning() {
		var st backend.Status
		r.gpu.ReadStatus(&st)
		for _, c := range st.Running {
			running[c.VM] += max(st.Time-c.Since, 0)
		}
	}
	for i, h := range r.hosts {
		g := r.guests[i]
		sn.busy[i] = r.gpu.VMBusy(h.id)
		sn.billed[i] = h.billedNs() + running[h.id]
		sn.kernels[i] = g.done
		sn.turnaround[i] = g.turnaround()
		sn.latP50[i], sn.latP99[i] = g.lat.Quantile(0.5), g.lat.Quantile(0.99)
		sn.oldest[i] = g.oldestWait()
		sn.errs[i] = g.err
	}
	return sn
}

// limit is how long a run may take on its timeline before it counts as
// stalled: generous, since a fair scheduler may slow an app down a lot.
func (r *runner) limit() int64 {
	var work int64
	for _, h := range r.hosts {
		w := h.vm.Workload
		work += int64(w.Start) + w.Kernels*(w.KernelUS+w.SleepUS)*1000
	}
	return 10*(r.duration+work) + 10e9
}

func (r *runner) isEnded() bool {
	select {
	case <-r.ended:
		return true
	default:
		return false
	}
}

func (r *runner) driveVirtual(ctx context.Context) error {
	limit := r.limit()
	for !r.isEnded() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("running the benchmark: %w", err)
		}
		now := r.sim.Clock().Now()
		if now >= limit {
			return fmt.Errorf("%w: nothing ended after %s of simulated time", ErrStalled, time.Duration(now))
		}
		if err := r.sim.Run(now + chunkNs); err != nil {
			return fmt.Errorf("running the sim: %w", err)
		}
		if err := r.guestError(); err != nil {
			return err
		}
	}
	w := r.snap.at
	for !r.ctl.covered(w) && r.sim.Clock().Now() < w+limit {
		if err := r.sim.Run(r.sim.Clock().Now() + chunkNs); err != nil {
			return fmt.Errorf("running the sim: %w", err)
		}
	}
	r.closing.Store(true)
	r.ctl.stop()
	return nil
}

func (r *runner) driveWall(ctx context.Context) error {
	timer := time.NewTimer(time.Duration(r.limit()))
	defer timer.Stop()
	select {
	case <-r.ended:
	case <-ctx.Done():
		return fmt.Errorf("running the benchmark: %w", ctx.Err())
	case <-timer.C:
		return fmt.Errorf("%w: nothing ended after %s", ErrStalled, time.Duration(r.limit()))
	}
	r.mu.Lock()
	w := r.snap.at
	r.mu.Unlock()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !r.ctl.covered(w) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("running the benchmark: %w", ctx.Err())
		case <-timer.C:
			return fmt.Errorf("%w: accounting did not cover the run", ErrStalled)
		case <-tick.C:
		}
	}
	r.closing.Store(true)
	r.ctl.stop()
	return nil
}

// guestError is the first guest failure (virtual clock: same goroutine).
func (r *runner) guestError() error {
	for _, g := range r.guests {
		if g.err != nil {
			return g.err
		}
	}
	return nil
}

func (r *runner) close() {
	r.closing.Store(true)
	if r.ctl != nil {
		r.ctl.stop()
	}
	r.gpu.Close()
}

// result assembles the Result from the snapshot and the control's figures.
func (r *runner) result(o Options) (*Result, error) {
	sn := r.snap
	for _, err := range sn.errs {
		if err != nil {
			return nil, err
		}
	}
	w := sn.at
	ctl, st := r.ctl.result(w), r.ctl.stats()
	res := &Result{
		Spec: o.Name, Backend: string(r.s.Backend), Clock: string(r.s.Clock), Accounting: string(r.s.Accounting), Policy: string(r.s.Policy),
		MaxVMsInFlight: r.occ.max.Load(),
		DurationNs:     w - r.t0, GPUBusyNs: sn.gpuBusy, PollerCPUNs: st.cpuNs, EstimatorNs: st.estimatorNs,
		Periods: st.periods, MeanPeriodNs: st.meanPeriodNs, SamplingNs: st.samplingNs,
		SwitchOverheadNs: sn.switchNs, SwitchOverheadFraction: sn.switchF, TracedNs: sn.tracedNs,
		VMs: make([]VMResult, len(r.hosts)),
	}
	if d := w - r.t0; d > 0 {
		res.Utilization = float64(sn.gpuBusy) / float64(d)
		res.GPUOverheadNs = max(d-sn.gpuBusy, 0)
		res.PollerCPUFraction = float64(st.cpuNs) / float64(d)
		if res.MeanPeriodNs == 0 && st.periods > 0 {
			res.MeanPeriodNs = w / st.periods
		}
	}
	var weights float64
	for _, h := range r.hosts {
		weights += float64(h.vm.Weight)
	}
	for i, h := range r.hosts {
		c := ctl[h.id]
		v := VMResult{
			Name: h.vm.Name, Kind: string(h.vm.Workload.Kind), Weight: h.vm.Weight,
			Demand:    demand(h.vm.Workload, h.vm.Channels),
			FairShare: float64(h.vm.Weight) / weights,
			TrueGPUNs: sn.busy[i], EstimatedGPUNs: c.accounted,
			Kernels: sn.kernels[i], TurnaroundNs: sn.turnaround[i], HeldBackNs: c.heldNs,
			LatencyP50Ns: sn.latP50[i], LatencyP99Ns: sn.latP99[i], OldestWaitNs: sn.oldest[i],
			StartNs: int64(h.vm.Workload.Start),
		}
		switch r.s.Accounting {
		case spec.AccountingOff:
			v.EstimatedGPUNs = 0
		case spec.AccountingNEONSampling:
			v.AccountedGPUNs = c.accounted
		default:
			v.AccountedGPUNs = sn.billed[i]
		}
		if sn.gpuBusy > 0 {
			v.Share = float64(v.TrueGPUNs) / float64(sn.gpuBusy)
		}
		if bk, ok := r.gpu.(billKinder); ok {
			k, n, o := bk.BillKinds(h.id)
			v.BillKinds = &BillKinds{Alone: int64(k[0]), Traced: int64(k[1]), Even: int64(k[2]), TracerNs: int64(n), SwitchesOut: int64(o)}
			for i, d := range bk.TracerDropped(h.id) {
				if d != 0 {
					if v.BillKinds.TracerDropped == nil {
						v.BillKinds.TracerDropped = map[string]int64{}
					}
					v.BillKinds.TracerDropped[cuda.DropNames[i]] = int64(d)
				}
			}
		}
		if r.s.Accounting != spec.AccountingOff && v.TrueGPUNs > 0 {
			a := float64(v.AccountedGPUNs)/float64(v.TrueGPUNs) - 1
			e := float64(v.EstimatedGPUNs)/float64(v.TrueGPUNs) - 1
			v.AccountingError, v.EstimateError = &a, &e
		}
		if c.firstHeld >= 0 {
			first := c.firstHeld - r.t0
			v.FirstHeldNs = &first
		}
		if c.outstanding >= 0 && w > r.t0 {
			o := float64(c.outstanding) / float64(w-r.t0)
			v.Outstanding = &o
		}
		res.Kernels += v.Kernels
		res.VMs[i] = v
	}
	switch a := gate.Arbitration(r.s.Arbitration()); a {
	case gate.ArbitrationTurns:
		res.Arbitration = string(a)
	case gate.ArbitrationAuto:
		res.Arbitration, res.ArbitrationInForce = string(a), string(st.auto.InForce)
		sw, tp := st.auto.Switches, st.auto.TurnsPeriods
		res.ArbitrationSwitches, res.TurnsPeriods = &sw, &tp
	}
	res.fairness()
	res.errorMax()
	return res, nil
}
