package accounting

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/backend/sim"
)

// wallSim is a wall-clock sim with two VMs running throttles back to back.
func wallSim(t *testing.T) *sim.Sim {
	t.Helper()
	s, err := sim.New(backend.Options{Clock: "wall"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for id := uint32(1); id <= 2; id++ {
		var v backend.VM
		again := func(backend.Completion) {
			if err := v.Submit(0, throttleCmd(200*us), 0); err != nil && !errors.Is(err, backend.ErrClosed) {
				t.Error(err)
			}
		}
		if v, err = s.Attach(backend.VMSpec{ID: id, Channels: 1, Complete: again}); err != nil {
			t.Fatal(err)
		}
		again(backend.Completion{})
	}
	return s
}

// TestWallPoller checks the wall driver's bookkeeping, not its timing: the
// machine may be loaded, so only invariants are asserted.
func TestWallPoller(t *testing.T) {
	s := wallSim(t)
	periods := make(chan Period, 64)
	cfg := Config{PollNs: 200 * us, Ratio: 4, Seed: 1}
	p, err := NewWall(cfg, s, s.Clock().Now, func(per Period) {
		select {
		case periods <- per:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var runErr error
	stopped := make(chan struct{})
	go func() {
		runErr = p.Run(ctx)
		close(stopped)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	var got []Period
	deadline := time.After(30 * time.Second) // a deadlock guard
	for len(got) < 5 {
		select {
		case per := <-periods:
			got = append(got, per)
		case <-deadline:
			t.Fatalf("%d periods in 30 s", len(got))
		}
	}
	cancel()
	<-stopped
	if !errors.Is(runErr, context.Canceled) {
		t.Errorf("Run returned %v, want context.Canceled", runErr)
	}
	for i, per := range got {
		if i > 0 && per.Start != got[i-1].End {
			t.Errorf("period %d starts at %d, previous ended at %d", i, per.Start, got[i-1].End)
		}
		if per.Phase.Start < per.Start || per.End < per.Phase.Start || per.NextEnd < per.End {
			t.Errorf("period %d out of order: %+v", i, per)
		}
		if tot := per.Phase.Total(); tot > per.PollNs() {
			t.Errorf("period %d: charged %d in a poll phase of %d", i, tot, per.PollNs())
		}
		var busy int64
		for _, b := range per.Busy {
			busy += b
		}
		if busy > per.End-per.Start {
			t.Errorf("period %d: extrapolated %d over %d", i, busy, per.End-per.Start)
		}
		if per.Phase.Samples < 2 {
			t.Errorf("period %d: %d samples", i, per.Phase.Samples)
		}
	}
	if p.CPUNs() <= 0 || p.PollNs() <= 0 {
		t.Errorf("CPUNs %d, PollNs %d", p.CPUNs(), p.PollNs())
	}
	t.Logf("%d periods; poll %d ns, CPU %d ns", p.Periods(), p.PollNs(), p.CPUNs())
}

func TestWallStopAndOff(t *testing.T) {
	s := wallSim(t)
	var p *Poller
	n := 0
	p, err := NewWall(Config{Method: MethodOff, PollNs: 200 * us, Ratio: 1, IdleFactor: 1}, s, s.Clock().Now, func(per Period) {
		if len(per.Busy) != 0 {
			t.Errorf("off charged %v", per.Busy)
		}
		if n++; n == 3 {
			p.Stop()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after Stop: %v", err)
		}
	case <-time.After(30 * time.Second): // a deadlock guard
		p.Stop()
		t.Fatal("Run did not return after Stop")
	}
	if n != 3 {
		t.Errorf("%d periods, want 3", n)
	}
}
