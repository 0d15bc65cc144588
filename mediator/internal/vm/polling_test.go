package vm

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/mediator/internal/spin"
)

// TestQuietSubmissionsAllComplete: with the shortest spin window (2 µs)
// and the guest pausing 0-4 µs between commands, the doorbell goroutine
// stops spinning around many commands, so the guest often stores put just
// as it clears HdrPolling. Every NOP must
// still complete (a record whose doorbell the guest left out and that the
// host's last look missed would hang its Wait until the deadline), and
// some submissions must have left out the doorbell. Then the word is clear
// once the VM idles, and set by nothing but a spin.
func TestQuietSubmissionsAllComplete(t *testing.T) {
	v, dev, ch := stormVM(t, "quiet", Config{SpinWindow: spin.MinWindow, SpinBudget: spin.NewBudget(1)})
	if dev.Header().Features&abi.FeaturePolling == 0 {
		t.Fatal("a VM that spins does not announce FeaturePolling")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 20000
	stops := 0
	for i := range n {
		pause := time.Duration(i%5) * time.Microsecond
		for t0 := time.Now(); time.Since(t0) < pause; {
		}
		if v.region.Load32(abi.HdrPolling) == 0 {
			stops++
		}
		idx, err := ch.Submit(ctx, abi.Command{Op: abi.OpNop})
		if err == nil {
			err = ch.Wait(ctx, idx)
		}
		if err != nil {
			t.Fatalf("NOP %d of %d (%d without a doorbell so far): %v", i, n, ch.Quiet(), err)
		}
	}
	if ch.Quiet() == 0 || stops == 0 {
		t.Errorf("%d of %d NOPs left out the doorbell, %d found the host not polling: want some of each", ch.Quiet(), n, stops)
	}
	eventually(t, "HdrPolling clear while the VM idles", func() bool {
		return v.region.Load32(abi.HdrPolling) == 0
	})
	t.Logf("%d of %d NOPs without a doorbell, %d found the host not polling; host read %d doorbells",
		ch.Quiet(), n, stops, v.Stats().Channels[0].Doorbells)
}

// TestNoPollingWithoutSpin: a VM that never spins neither announces
// FeaturePolling nor sets the word, and its guests ring every time.
func TestNoPollingWithoutSpin(t *testing.T) {
	v, dev, ch := stormVM(t, "still", Config{})
	if dev.Header().Features&abi.FeaturePolling != 0 {
		t.Error("a VM that never spins announces FeaturePolling")
	}
	runNOPs(t, ch, 100)
	if q := ch.Quiet(); q != 0 {
		t.Errorf("%d submissions left out the doorbell", q)
	}
	if w := v.region.Load32(abi.HdrPolling); w != 0 {
		t.Errorf("HdrPolling %d", w)
	}
}

// TestNOPRoundTripAllocFree: a NOP round trip of a process guest against a
// VM whose backend completes in Submit allocates nothing, guest and host
// together, spinning or not (the guest's waits spin: the sleep on the
// eventfd is the slow path).
func TestNOPRoundTripAllocFree(t *testing.T) {
	for _, c := range spinModes {
		t.Run(c.name, func(t *testing.T) {
			_, _, ch := stormVM(t, "allocs", Config{SpinWindow: c.cfg.Window, SpinBudget: spin.NewBudget(c.cfg.Cores)})
			p := sdk.DefaultPoll()
			p.WakeSpin = time.Minute
			if err := ch.SetPoll(p); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var err error
			nop := func() {
				var idx uint32
				if idx, err = ch.Submit(ctx, abi.Command{Op: abi.OpNop}); err == nil {
					err = ch.Wait(ctx, idx)
				}
				if err != nil {
					panic(err)
				}
			}
			for range 100 {
				nop()
			}
			if n := testing.AllocsPerRun(5000, nop); n != 0 {
				t.Errorf("%v allocations a NOP round trip", n)
			}
		})
	}
}

// runNOPs runs n NOP round trips on ch, one at a time.
func runNOPs(t *testing.T, ch *sdk.Channel, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range n {
		idx, err := ch.Submit(ctx, abi.Command{Op: abi.OpNop})
		if err == nil {
			err = ch.Wait(ctx, idx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
