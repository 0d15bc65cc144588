package vm

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/backend/sim"
)

// simVM is a VM on the sim's wall clock (commands take their real time)
// with one channel of 8 entries, and a process guest joined to it.
func simVM(t *testing.T) (*VM, *sdk.Device, *sdk.Channel) {
	t.Helper()
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	be, err := sim.New(backend.Options{Clock: "wall"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	v, err := New(Config{Name: "wake", ID: 1, Weight: 1, Layout: l, Limits: abi.DefaultLimits(),
		Socket: filepath.Join(t.TempDir(), "wake.sock")}, be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	dev := dial(t, v)
	if dev.Header().Features&abi.FeatureWake == 0 {
		t.Fatalf("features %#x: the endpoint does not announce FeatureWake", dev.Header().Features)
	}
	ch, err := dev.Channel(0)
	if err != nil {
		t.Fatal(err)
	}
	return v, dev, ch
}

func (v *VM) wakes() uint64 { return v.Stats().Channels[0].Wakes }

// TestWakeProcessGuest: a process guest waiting for a long command stops
// polling, sleeps on its eventfd and is woken by the mediator's signal when
// the command completes; waits for ring space and for a reset sleep too; a
// guest that polls is never signalled.
func TestWakeProcessGuest(t *testing.T) {
	v, _, ch := simVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const kernel = 5 * time.Millisecond
	t0 := time.Now()
	idx, err := ch.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: uint64(kernel)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Wait(ctx, idx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	if ch.Sleeps() == 0 || v.wakes() == 0 {
		t.Fatalf("waited %v for a %v kernel with %d sleeps and %d signals: the guest did not sleep until woken", took, kernel, ch.Sleeps(), v.wakes())
	}
	if took < kernel {
		t.Fatalf("woken after %v, before the %v kernel ended", took, kernel)
	}
	t.Logf("a %v kernel waited for in %v (%d sleeps, %d signals)", kernel, took, ch.Sleeps(), v.wakes())
	if w := v.region.Load64(v.cfg.Layout.ChannelOff(0) + abi.ChWake); w != 0 {
		t.Errorf("wake word %#x after the wait, want 0 (disarmed)", w)
	}

	// More kernels than the ring holds: Submit sleeps for space.
	cmds := make([]abi.Command, 3*ch.Entries())
	for i := range cmds {
		cmds[i] = abi.Command{Op: abi.OpThrottle, DurationNs: 200_000}
	}
	sleeps := ch.Sleeps()
	last, err := ch.Submit(ctx, cmds...)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	if ch.Sleeps() == sleeps {
		t.Errorf("%d kernels of 200 µs through %d entries without a sleep", len(cmds), ch.Entries())
	}

	// A failure wakes the waiter with the error; the reset goes on.
	idx, err = ch.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: 2e6}, abi.Command{Op: abi.OpThrottle, DurationNs: 1e12})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Wait(ctx, idx); !errors.Is(err, abi.ErrTooLong) {
		t.Fatalf("Wait past a too-long THROTTLE: %v, want ErrTooLong", err)
	}
	if err := ch.Reset(ctx); err != nil {
		t.Fatal(err)
	}

	// A guest that polls is not signalled.
	p := sdk.DefaultPoll()
	p.NoWake = true
	if err := ch.SetPoll(p); err != nil {
		t.Fatal(err)
	}
	sleeps, wakes := ch.Sleeps(), v.wakes()
	idx, err = ch.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: 2e6})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Wait(ctx, idx); err != nil {
		t.Fatal(err)
	}
	if ch.Sleeps() != sleeps || v.wakes() != wakes {
		t.Errorf("polling: sleeps %d -> %d, signals %d -> %d; want none", sleeps, ch.Sleeps(), wakes, v.wakes())
	}
}

// TestWakeCancel: a sleeping waiter returns when its context ends (deadline
// or cancellation), and the next wait still sleeps and wakes normally.
func TestWakeCancel(t *testing.T) {
	_, _, ch := simVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	idx, err := ch.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: 300e6})
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	t0 := time.Now()
	if err := ch.Wait(short, idx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline: %v", err)
	}
	if d := time.Since(t0); d > 150*time.Millisecond {
		t.Errorf("Wait returned %v after a 20 ms deadline", d)
	}
	cctx, cancelNow := context.WithCancel(ctx)
	time.AfterFunc(10*time.Millisecond, cancelNow)
	t0 = time.Now()
	if err := ch.Wait(cctx, idx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait cancelled: %v", err)
	}
	if d := time.Since(t0); d > 150*time.Millisecond {
		t.Errorf("Wait returned %v after a cancellation at 10 ms", d)
	}
	sleeps := ch.Sleeps()
	if err := ch.Wait(ctx, idx); err != nil {
		t.Fatal(err)
	}
	if done, _ := ch.Done(idx); !done {
		t.Fatal("Wait returned before the kernel completed")
	}
	// One sleep, perhaps two (a signal the cancelled wait left): not a
	// spin of wakeups on a cancellation left pending.
	if n := ch.Sleeps() - sleeps; n == 0 || n > 3 {
		t.Errorf("%d sleeps for the rest of the kernel, want 1 or 2", n)
	}
}
