package sdk

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// Poll says how a waiter polls shared memory for the host's progress: it
// busy-polls for Spin, then yields the processor between polls until
// Spin+Yield have passed, then sleeps between polls, doubling the sleep from
// a microsecond up to MaxSleep. Short round trips (a few µs) finish in the
// spin phase; long commands cost little CPU once the waiter sleeps.
type Poll struct {
	Spin     time.Duration // busy-poll budget; 0 skips busy polling
	Yield    time.Duration // runtime.Gosched phase after Spin
	MaxSleep time.Duration // longest sleep between polls afterwards; at least 1µs
}

// DefaultPoll spins 50µs, yields for 200µs more, then sleeps up to 200µs
// between polls, which bounds how late a long command's completion is seen.
func DefaultPoll() Poll {
	return Poll{Spin: 50 * time.Microsecond, Yield: 200 * time.Microsecond, MaxSleep: 200 * time.Microsecond}
}

// Validate rejects negative durations.
func (p Poll) Validate() error {
	if p.Spin < 0 || p.Yield < 0 || p.MaxSleep < 0 {
		return fmt.Errorf("poll %+v: durations must not be negative", p)
	}
	return nil
}

// spinCheck is how many busy polls pass between looks at the clock and the
// context: both cost more than a load of shared memory.
const spinCheck = 64

// until polls cond until it reports done or an error, or ctx ends.
func (p Poll) until(ctx context.Context, cond func() (bool, error)) error {
	if done, err := cond(); done || err != nil {
		return err
	}
	start := time.Now()
	sleep := time.Microsecond
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	spinning := p.Spin > 0
	for i := 1; ; i++ {
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
				// A goroutine this one readied (an in-process host)
				// waits in this P's runnext, which other Ps steal
				// only after a sleep: let it run.
				runtime.Gosched()
				continue
			}
			spinning = false
		}
		if err := ctxDone(ctx); err != nil {
			return err
		}
		if time.Since(start) < p.Spin+p.Yield {
			runtime.Gosched()
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
