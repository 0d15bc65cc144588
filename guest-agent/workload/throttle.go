package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
)

// ThrottleConfig is one throttle run.
type ThrottleConfig struct {
	Kernel   time.Duration // length of each THROTTLE kernel (> 0)
	Sleep    time.Duration // pause between a completion and the next submit; 0: none
	Duration time.Duration // stop after this long; 0: no time limit
	Kernels  int           // stop after this many completed kernels; 0: no count limit
	// MaxErrors is how many failed kernels are tolerated (each followed by a
	// channel reset); one more ends the run with the error.
	MaxErrors int
	// Depth is how many kernels are kept in flight (default 1: LoGA's
	// throttle waits for each kernel, unless InFlight says otherwise). A
	// deeper queue keeps the GPU busy across the guest's own completion
	// latency; Sleep then follows each completion before the next submit.
	Depth int
	// InFlight, with Depth 0 and no Sleep, keeps as many kernels in flight
	// as make this much GPU time (at least one, at most the ring's
	// entries): kernels back to back at any length keep the GPU busy across
	// the same completion latency. 0: one kernel.
	InFlight time.Duration
}

// DefaultInFlight is sluice-agent's default GPU time in flight for kernels
// back to back (run throttle --inflight). A guest sees each completion late
// (a process guest polls with sleeps that the Go runtime rounds up to about
// a millisecond; a TCG guest takes milliseconds from a completion to its
// next doorbell), so with little in flight it cannot keep the GPU busy on
// its own: when the scheduler holds the other VMs the GPU idles, and dfq,
// being work-conserving, releases them. With a fixed 16 kernels in flight, a
// guest of 100 µs kernels (1.6 ms in flight) got 31-35% of the GPU under dfq
// beside one of 1 ms kernels (16 ms), the GPU 97% busy; with 20 ms each
// (200 and 20 kernels), 49-52%, the GPU busy throughout (make demo, sim,
// wall clock, 2 cores).
const DefaultInFlight = 20 * time.Millisecond

// depth is how many kernels Throttle keeps in flight on a ring of entries.
func (c ThrottleConfig) depth(entries int) int {
	if c.Depth > 0 {
		return c.Depth
	}
	if c.Sleep > 0 || c.InFlight <= 0 {
		return 1
	}
	n := (c.InFlight + c.Kernel - 1) / c.Kernel
	return int(min(n, time.Duration(max(entries, 1))))
}

// Validate checks that the run is bounded and well formed.
func (c ThrottleConfig) Validate() error {
	switch {
	case c.Kernel <= 0:
		return fmt.Errorf("throttle kernel of %v: must be positive", c.Kernel)
	case c.Sleep < 0 || c.Duration < 0 || c.Kernels < 0 || c.MaxErrors < 0 || c.Depth < 0 || c.InFlight < 0:
		return errors.New("throttle sleep, duration, kernels, depth, in-flight time and max errors must not be negative")
	case c.Duration == 0 && c.Kernels == 0:
		return errors.New("throttle run needs a duration or a kernel count")
	}
	return nil
}

// ThrottleResult is what a throttle run measured. Turnaround is submit to
// completion observed, by the guest's wall clock.
type ThrottleResult struct {
	Workload       string  `json:"workload"`
	Channel        int     `json:"channel"`
	KernelUs       float64 `json:"kernel_us"`
	SleepUs        float64 `json:"sleep_us"`
	Depth          int     `json:"depth"` // kernels kept in flight
	Kernels        int     `json:"kernels"`
	Errors         int     `json:"errors"`
	ElapsedNs      int64   `json:"elapsed_ns"`
	TurnaroundNs   Summary `json:"turnaround_ns"`
	SubmittedGPUNs int64   `json:"submitted_gpu_ns"`
}

// Throttle runs LoGA's throttle benchmark on ch: submit a THROTTLE kernel,
// wait for it, sleep, repeat, until cfg's duration or kernel count is
// reached or ctx ends. On an error it returns what it measured so far with
// the error.
func Throttle(ctx context.Context, ch *sdk.Channel, cfg ThrottleConfig) (res ThrottleResult, err error) {
	res = ThrottleResult{
		Workload: "throttle",
		Channel:  ch.Index(),
		KernelUs: float64(cfg.Kernel) / float64(time.Microsecond),
		SleepUs:  float64(cfg.Sleep) / float64(time.Microsecond),
	}
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	cmd := abi.Command{Op: abi.OpThrottle, DurationNs: uint64(cfg.Kernel)}
	var turnaround []time.Duration
	start := time.Now()
	var end time.Time
	if cfg.Duration > 0 {
		end = start.Add(cfg.Duration)
	}
	defer func() {
		res.ElapsedNs = int64(time.Since(start))
		res.Kernels = len(turnaround)
		res.SubmittedGPUNs = int64(len(turnaround)) * int64(cfg.Kernel)
		res.TurnaroundNs = Summarize(turnaround)
	}()
	depth := cfg.depth(ch.Entries())
	res.Depth = depth
	type flight struct {
		idx uint32
		t0  time.Time
	}
	var queue []flight
	submitted := 0
	more := func() bool {
		return (cfg.Kernels == 0 || submitted < cfg.Kernels) && (end.IsZero() || time.Now().Before(end))
	}
	for {
		for len(queue) < depth && more() {
			t0 := time.Now()
			idx, err := ch.Submit(ctx, cmd)
			if err != nil {
				return res, fmt.Errorf("throttle kernel: %w", err)
			}
			queue = append(queue, flight{idx, t0})
			submitted++
		}
		if len(queue) == 0 {
			return res, nil
		}
		f := queue[0]
		queue = queue[1:]
		err := ch.Wait(ctx, f.idx)
		t1 := time.Now()
		var ce *sdk.ChannelError
		switch {
		case errors.As(err, &ce):
			res.Errors++
			if res.Errors > cfg.MaxErrors {
				return res, fmt.Errorf("throttle kernel: %w", err)
			}
			// The failed kernel does not count, and the ones behind it are
			// dropped by the reset.
			submitted -= len(queue) + 1
			queue = queue[:0]
			if err := ch.Reset(ctx); err != nil {
				return res, err
			}
			continue
		case err != nil:
			return res, fmt.Errorf("throttle kernel: %w", err)
		}
		turnaround = append(turnaround, t1.Sub(f.t0))
		if err := sleep(ctx, cfg.Sleep); err != nil {
			return res, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
