package sdk

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/sluice-gpu/sluice/internal/spin"
)

// Poll says how a waiter waits for the host's progress.
//
// Where the host can signal the guest (the header announces
// abi.FeatureWake and the transport implements Interrupts: a process
// guest, or a QEMU guest's device opened through vfio-pci), the waiter busy-polls shared memory for WakeSpin, then arms the
// channel's wake word, looks once more and sleeps on its eventfd until the
// host signals that the record it waits for completed (or the channel
// failed); it disarms when it wakes. A waiter that polls leaves the word
// clear, so the host does not signal it (virtio's event index idea). NoWake
// keeps polling.
//
// Otherwise (a QEMU guest without an IOMMU, an old host, NoWake) it polls: it busy-polls for
// Spin, then yields the processor between polls until Spin+Yield have
// passed, then sleeps between polls, doubling the sleep from a microsecond
// up to MaxSleep. Short round trips (a few µs) finish in the spin phase;
// long commands cost little CPU once the waiter sleeps, but a sleeping
// poller sees a completion as late as its timer fires (about a millisecond
// late on loaded machines).
type Poll struct {
	Spin     time.Duration // busy-poll budget; 0 skips busy polling
	Yield    time.Duration // runtime.Gosched phase after Spin
	MaxSleep time.Duration // longest sleep between polls afterwards; at least 1µs
	WakeSpin time.Duration // with host wakeups: busy-poll this long, then sleep on the eventfd
	NoWake   bool          // poll even where the host could wake the waiter
}

// DefaultPoll spins 50µs, yields for 200µs more, then sleeps up to 200µs
// between polls, which bounds how late a long command's completion is seen;
// where the host wakes waiters it spins 50µs and then sleeps until woken
// (20µs made NOP round trips on a 2-core machine 3-5 times slower at the
// p50: the ones that slept came back late and slowed the next;
// bench/results/wake).
func DefaultPoll() Poll {
	return Poll{Spin: 50 * time.Microsecond, Yield: 200 * time.Microsecond, MaxSleep: 200 * time.Microsecond,
		WakeSpin: 50 * time.Microsecond}
}

// Validate rejects negative durations.
func (p Poll) Validate() error {
	if p.Spin < 0 || p.Yield < 0 || p.MaxSleep < 0 || p.WakeSpin < 0 {
		return fmt.Errorf("poll %+v: durations must not be negative", p)
	}
	return nil
}

// spinCheck is how many busy polls pass between looks at the clock and the
// context: both cost more than a load of shared memory.
const spinCheck = 64

// sleeper arms the channel's wake word, looks at cond once more and, if it
// is not done, blocks until the host signals or ctx ends; it reports cond's
// result after waking.
type sleeper func(ctx context.Context, cond func() (bool, error)) (bool, error)

// waiter is what a channel's waits keep between them: the yielder of their
// busy polls and the diagnostic trace (nil: none).
type waiter struct {
	y  *spin.Yielder
	tr *WaitTrace
}

func newWaiter() waiter { return waiter{y: spin.New()} }

// look notes a look at the host's line in the trace.
func (w *waiter) look() {
	if w.tr != nil {
		w.tr.look()
	}
}

// spun is called every spinCheck looks of a busy poll: it gives the
// processor to the Go scheduler as internal/spin says (every time on a
// host of fewer than 4 processors, where a goroutine this one readied, an
// in-process host, waits in this P's run queue; every spin.Period on a
// larger one, where a yield costs microseconds and such a goroutine is
// stolen by an idle processor within a few).
func (w *waiter) spun() {
	if w.y.Idle() && w.tr != nil {
		w.tr.Yields++
	}
}

// until polls cond until it reports done or an error, or ctx ends. With a
// sleeper, it busy-polls for WakeSpin and then sleeps until woken instead.
func (p Poll) until(ctx context.Context, cond func() (bool, error), sl sleeper, w *waiter) error {
	w.look()
	if done, err := cond(); done || err != nil {
		return err
	}
	start := time.Now()
	w.y.Restart(start)
	if sl != nil {
		return p.spinThenSleep(ctx, cond, sl, w, start)
	}
	sleep := time.Microsecond
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	spinning := p.Spin > 0
	for i := 1; ; i++ {
		w.look()
		if done, err := cond(); done || err != nil {
			return err
		}
		if spinning {
			if i%spinCheck != 0 {
				continue
			}
			if err := ctxDone(ctx); err != nil {
				return err
			}
			if time.Since(start) < p.Spin {
				w.spun()
				continue
			}
			spinning = false
		}
		if err := ctxDone(ctx); err != nil {
			return err
		}
		if time.Since(start) < p.Spin+p.Yield {
			runtime.Gosched()
			if w.tr != nil {
				w.tr.Yields++
			}
			continue
		}
		if timer == nil {
			timer = time.NewTimer(sleep)
		} else {
			timer.Reset(sleep)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		if sleep < p.MaxSleep {
			sleep = min(2*sleep, p.MaxSleep)
		}
	}
}

func ctxDone(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
		return nil
	}
}

// spinThenSleep busy-polls cond for WakeSpin, then sleeps until the host
// signals, as often as it takes.
func (p Poll) spinThenSleep(ctx context.Context, cond func() (bool, error), sleep sleeper, w *waiter, start time.Time) error {
	for i := 1; ; i++ {
		w.look()
		if done, err := cond(); done || err != nil {
			return err
		}
		if i%spinCheck != 0 {
			continue
		}
		if err := ctxDone(ctx); err != nil {
			return err
		}
		if time.Since(start) >= p.WakeSpin {
			break
		}
		w.spun()
	}
	for {
		if done, err := sleep(ctx, cond); done || err != nil {
			return err
		}
	}
}

// WaitTrace counts what a channel's waits did, for a diagnostic of where a
// round trip's time goes (sluice-agent run latency --causes). A channel
// keeps none unless SetTrace gives it one; with one, every look at the
// host's line also reads the clock.
type WaitTrace struct {
	Looks  uint64 // looks at the host's line
	Yields uint64 // times a wait gave its processor to the Go scheduler
	// MaxGap is the longest time between two looks of a wait since
	// ResetGap: a waiter off its CPU (preempted, or in the scheduler)
	// sees the host's progress that much late.
	MaxGap time.Duration
	last   time.Time
}

// ResetGap starts a new MaxGap: the next look has no look before it.
func (t *WaitTrace) ResetGap() {
	t.MaxGap, t.last = 0, time.Time{}
}

func (t *WaitTrace) look() {
	now := time.Now()
	if !t.last.IsZero() {
		t.MaxGap = max(t.MaxGap, now.Sub(t.last))
	}
	t.last = now
	t.Looks++
}
