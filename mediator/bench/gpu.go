package bench

import (
	"fmt"
	"sync"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/backend/cuda"
	"github.com/sluice-gpu/sluice/mediator/backend/sim"
	"github.com/sluice-gpu/sluice/mediator/bench/spec"
)

// gpu is the backend a run drives, with what the runner needs beyond the
// backend contract: timers on the backend's clock and the ground truth.
type gpu interface {
	backend.Backend
	backend.StatusReader
	// After calls fn delay ns from now on the backend's clock. Calls of
	// After functions and completions never overlap.
	After(delay int64, fn func())
	// VMBusy is the GPU time a VM used, by the backend's own measure.
	VMBusy(id uint32) int64
	// Busy is the GPU time all VMs used.
	Busy() int64
	// truthHasRunning reports whether VMBusy counts the commands running
	// now (their time so far): the bill at a snapshot counts them too only
	// then, so that both sides count the same commands.
	truthHasRunning() bool
	// serial wraps a completion callback so that it does not overlap After
	// functions (the sim runs both on one goroutine already).
	serial(func(backend.Completion)) func(backend.Completion)
}

func openGPU(s spec.Spec) (gpu, *sim.Sim, error) {
	switch s.Backend {
	case spec.BackendSim:
		params := map[string]string{}
		clock := "wall"
		if s.Clock == spec.ClockVirtual {
			clock, params["drive"] = "virtual", "manual"
		}
		if ts := s.Tuning.SimTimeslice; ts > 0 {
			params["timeslice"] = ts.String()
		}
		sm, err := sim.New(backend.Options{Clock: clock, Params: params})
		if err != nil {
			return nil, nil, fmt.Errorf("opening the sim: %w", err)
		}
		return simGPU{sm}, sm, nil
	case spec.BackendCUDA:
		b, err := backend.Open("cuda", backend.Options{Clock: "wall"})
		if err != nil {
			return nil, nil, fmt.Errorf("%w here: %w", ErrUnsupported, err)
		}
		cb := b.(*cuda.Backend)
		cb.KeepGroundTruth() // the THROTTLE kernels' own times: what bills are compared with
		return &cudaGPU{Backend: cb}, nil, nil
	}
	return nil, nil, fmt.Errorf("%w: backend %s", ErrUnsupported, s.Backend)
}

// simGPU is the simulated GPU; its ground truth is its own timeline.
type simGPU struct{ *sim.Sim }

func (g simGPU) VMBusy(id uint32) int64 { return g.Sim.VMBusy(id) }
func (g simGPU) Busy() int64            { return g.EngineBusy(sim.Compute) + g.EngineBusy(sim.Copy) }

// truthHasRunning: the sim's timeline has every command's time so far.
func (simGPU) truthHasRunning() bool { return true }
func (simGPU) serial(f func(backend.Completion)) func(backend.Completion) {
	return f
}

// cudaGPU is a real GPU: timers are Go timers, and the ground truth is what
// the throttle kernels measured on %globaltimer.
type cudaGPU struct {
	*cuda.Backend
	mu  sync.Mutex // serializes After functions and completions
	ids []uint32
}

func (g *cudaGPU) Attach(s backend.VMSpec) (backend.VM, error) {
	vm, err := g.Backend.Attach(s)
	if err == nil {
		g.ids = append(g.ids, s.ID)
	}
	return vm, err
}

func (g *cudaGPU) After(delay int64, fn func()) {
	time.AfterFunc(time.Duration(delay), func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		fn()
	})
}

func (g *cudaGPU) serial(f func(backend.Completion)) func(backend.Completion) {
	return func(c backend.Completion) {
		g.mu.Lock()
		defer g.mu.Unlock()
		f(c)
	}
}

func (g *cudaGPU) VMBusy(id uint32) int64 {
	ns, _, _ := g.GroundTruth(id)
	return ns
}

// truthHasRunning: a THROTTLE's record comes at its end, so the truth has
// completed kernels only; a running command's time from its start (which,
// while its context is switched out, is not its own) would be billed beside
// no truth.
func (*cudaGPU) truthHasRunning() bool { return false }

func (g *cudaGPU) Busy() int64 {
	var sum int64
	for _, id := range g.ids {
		sum += g.VMBusy(id)
	}
	return sum
}
