package sdk_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/sdk/sdktest"
)

// A waiter on a host that wakes guests spins WakeSpin, then sleeps until
// the host signals. The command is a thousand spins long: a waiter
// descheduled for a few milliseconds mid-spin on a loaded test host (it
// was, with a 3 ms command) still finds it running after.
func TestWakeSleepsUntilSignalled(t *testing.T) {
	ctx := testCtx(t)
	h, d := sdktest.Open(t, sdktest.Config{Wake: true})
	c := channel(t, d, 1)
	idx, err := c.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: 50e6})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, idx); err != nil {
		t.Fatal(err)
	}
	if c.Sleeps() == 0 || h.Wakes() == 0 {
		t.Fatalf("a 50 ms command: %d sleeps, %d signals; want the waiter asleep until signalled", c.Sleeps(), h.Wakes())
	}
}

// A signal lost on the way costs a sleeping waiter a recheck interval (10
// ms), not its deadline.
func TestWakeLostSignalCostsARecheck(t *testing.T) {
	ctx := testCtx(t)
	h, d := sdktest.Open(t, sdktest.Config{Wake: true, LoseWakes: true})
	c := channel(t, d, 1)
	for range 3 {
		idx, err := c.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: 1e6})
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = c.Wait(short, idx)
		cancel()
		if err != nil {
			t.Fatalf("a 1 ms command whose wakeup was lost: %v", err)
		}
	}
	if c.Sleeps() == 0 || h.Wakes() == 0 {
		t.Fatalf("%d sleeps, %d signals sent (and lost); want the waiter asleep", c.Sleeps(), h.Wakes())
	}
}

// Without FeatureWake (a QEMU guest's host, an old host) or with NoWake, the
// waiter polls and the host never signals.
func TestWakePollsWithoutTheFeature(t *testing.T) {
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		cfg  sdktest.Config
		poll func(*sdk.Poll)
	}{
		{"host without FeatureWake", sdktest.Config{}, func(*sdk.Poll) {}},
		{"NoWake", sdktest.Config{Wake: true}, func(p *sdk.Poll) { p.NoWake = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := sdk.DefaultPoll()
			tc.poll(&p)
			h, d := sdktest.Open(t, tc.cfg, sdk.WithPoll(p))
			c := channel(t, d, 0)
			idx, err := c.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: 2e6})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Wait(ctx, idx); err != nil {
				t.Fatal(err)
			}
			if c.Sleeps() != 0 || h.Wakes() != 0 {
				t.Fatalf("%d sleeps, %d signals; want a poller", c.Sleeps(), h.Wakes())
			}
		})
	}
}

// Waits for ring space and for a reset sleep and wake too; a failure wakes
// a waiter with its error.
func TestWakeSpaceResetAndFailure(t *testing.T) {
	ctx := testCtx(t)
	h, d := sdktest.Open(t, sdktest.Config{Wake: true, Layout: sdktest.SmallLayout(), Handler: sdktest.FailAt(0, 20, abi.ErrDevice)})
	c := channel(t, d, 0)
	cmds := make([]abi.Command, 20)
	for i := range cmds {
		cmds[i] = abi.Command{Op: abi.OpThrottle, DurationNs: 300_000}
	}
	last, err := c.Submit(ctx, cmds...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	if c.Sleeps() < 2 {
		t.Errorf("20 commands of 300 µs through 8 entries: %d sleeps", c.Sleeps())
	}
	idx, err := c.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: 1e6}, nop())
	if err != nil {
		t.Fatal(err)
	}
	var ce *sdk.ChannelError
	if err := c.Wait(ctx, idx); !errors.As(err, &ce) || ce.Index != 20 {
		t.Fatalf("Wait past a failing record: %v", err)
	}
	if err := c.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if h.Wakes() == 0 {
		t.Error("no signal sent")
	}
}

// TestWakeNoLostWakeup races the waiter's arming against completions that
// land at random moments around it (run it with -race): with WakeSpin 0
// the waiter arms at once, so completions published just before the arm,
// between the arm and the second look, and after it all happen. Every wait
// must end long before the deadlock guard.
func TestWakeNoLostWakeup(t *testing.T) {
	ctx := testCtx(t)
	handler := func(_, _ uint32, cmd abi.Command) abi.ErrorCode {
		if n := rand.IntN(4); n > 0 {
			busy := time.Duration(rand.IntN(30*n)) * time.Microsecond
			for t0 := time.Now(); time.Since(t0) < busy; {
			}
		}
		return abi.OK
	}
	p := sdk.DefaultPoll()
	p.WakeSpin = 0
	h, d := sdktest.Open(t, sdktest.Config{Wake: true, Handler: handler}, sdk.WithPoll(p))
	c := channel(t, d, 0)
	const rounds = 5000
	for i := range rounds {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		idx, err := c.Submit(wctx, nop())
		if err == nil {
			err = c.Wait(wctx, idx)
		}
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v (sleeps %d, signals %d): a lost wakeup", i, err, c.Sleeps(), h.Wakes())
		}
	}
	t.Logf("%d round trips: %d sleeps, %d signals", rounds, c.Sleeps(), h.Wakes())
}
