package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/workload"
	"github.com/sluice-gpu/sluice/internal/cmdline"
)

func newRunCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a workload on one channel",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newThrottleCmd(g), newMemsetCmd(g), newLatencyCmd(g), newSyscallCmd(g), newSyscallBenchCmd(g), newWordCountCmd(g), newSweepCmd(g))
	return cmd
}

// channelFlags are the flags every workload takes.
type channelFlags struct {
	channel int
	asJSON  bool
}

func (f *channelFlags) add(cmd *cobra.Command) {
	cmd.Flags().IntVar(&f.channel, "channel", 0, "channel to submit to")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the result as JSON")
}

// withChannel opens the region, hands run the channel, prints what run
// returns (also when it fails part way) and closes the region.
func withChannel[R any](cmd *cobra.Command, g *globals, f *channelFlags, run func(*sdk.Channel) (R, error), human func(io.Writer, R)) error {
	d, finish, err := g.open(cmd)
	if err != nil {
		return err
	}
	ch, err := d.Channel(f.channel)
	if err != nil {
		return finish(err)
	}
	res, runErr := run(ch)
	if f.asJSON {
		if err := writeJSON(g.out, res); err != nil {
			return finish(errors.Join(runErr, err))
		}
	} else {
		human(g.out, res)
	}
	return finish(runErr)
}

func newThrottleCmd(g *globals) *cobra.Command {
	var (
		f   channelFlags
		cfg workload.ThrottleConfig
	)
	cmd := &cobra.Command{
		Use:   "throttle",
		Short: "LoGA's throttle benchmark: spin kernels of --kernel with --sleep between them",
		Long: `Repeat: submit a THROTTLE kernel of --kernel, wait for its completion, sleep
--sleep; until --duration has elapsed or --kernels kernels have completed.
Reports each kernel's turnaround (submit to completion observed). Durations
are Go durations: 100us, 1ms, 10s.

Kernels back to back (--sleep 0) are kept --inflight of GPU time deep
(20ms: 200 kernels of 100 µs, 20 of 1 ms; at most the ring's entries), so
that the GPU stays busy although the guest sees each completion late;
--depth N keeps N kernels in flight instead (--depth 1 waits for each, as
LoGA's throttle does, and is the default with --sleep).`,
		Example: `  sluice-agent --endpoint /run/sluice/vm1.sock run throttle --kernel 100us --sleep 50us --duration 5s
  sluice-agent --device run throttle --kernel 1ms --kernels 1000 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("kernels") && !cmd.Flags().Changed("duration") {
				cfg.Duration = 0 // a count alone bounds the run
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			return withChannel(cmd, g, &f, func(ch *sdk.Channel) (workload.ThrottleResult, error) {
				return workload.Throttle(cmd.Context(), ch, cfg)
			}, printThrottle)
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.DurationVar(&cfg.Kernel, "kernel", time.Millisecond, "length of each throttle kernel")
	fl.DurationVar(&cfg.Sleep, "sleep", 0, "sleep between a completion and the next kernel")
	cmdline.Renamed(fl, "kernel-us", "kernel", "a duration such as 100us")
	cmdline.Renamed(fl, "sleep-us", "sleep", "a duration such as 50us")
	fl.DurationVar(&cfg.Duration, "duration", 10*time.Second, "stop after this long; 0: no time limit (as when only --kernels is given)")
	fl.IntVar(&cfg.Kernels, "kernels", 0, "stop after this many completed kernels (0: no count limit)")
	fl.IntVar(&cfg.Depth, "depth", 0, "kernels kept in flight (0: --inflight's worth, or 1 with --sleep; 1: wait for each, as LoGA's throttle does)")
	fl.DurationVar(&cfg.InFlight, "inflight", workload.DefaultInFlight, "GPU time kept in flight with --depth 0 and --sleep 0")
	fl.IntVar(&cfg.MaxErrors, "max-errors", 0, "failed kernels tolerated (each followed by a channel reset)")
	return cmd
}

func printThrottle(w io.Writer, r workload.ThrottleResult) {
	fmt.Fprintf(w, "throttle on channel %d: %d kernels of %g µs, sleep %g µs, depth %d, %d errors, in %v\n",
		r.Channel, r.Kernels, r.KernelUs, r.SleepUs, r.Depth, r.Errors, time.Duration(r.ElapsedNs))
	fmt.Fprintf(w, "submitted GPU time %v\n", time.Duration(r.SubmittedGPUNs))
	printSummary(w, "turnaround", r.TurnaroundNs)
}

func newMemsetCmd(g *globals) *cobra.Command {
	var (
		f         channelFlags
		bufferMiB uint64
		cfg       workload.MemsetConfig
	)
	cmd := &cobra.Command{
		Use:   "memset",
		Short: "Allocate device buffers and MEMSET them in turn, then free them",
		Long: `ALLOC --buffers buffers of --buffer-mib MiB (handles --first-handle on); an
ALLOC the host refuses (e.g. "no memory" past the VM's quota) ends the
allocation, is reported as alloc_error, and the run goes on with the buffers
it got. Then MEMSET the buffers in turn, --depth in flight, until --duration
has elapsed or --count MEMSETs have completed; then FREE them. Reports each
MEMSET's turnaround (submit to completion observed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if bufferMiB > 1<<40 {
				return fmt.Errorf("--buffer-mib %d: too large", bufferMiB)
			}
			cfg.Size = bufferMiB << 20
			if cmd.Flags().Changed("count") && !cmd.Flags().Changed("duration") {
				cfg.Duration = 0 // a count alone bounds the run
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			return withChannel(cmd, g, &f, func(ch *sdk.Channel) (workload.MemsetResult, error) {
				return workload.Memset(cmd.Context(), ch, cfg)
			}, printMemset)
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.Uint64Var(&bufferMiB, "buffer-mib", 64, "size of each buffer in MiB")
	fl.IntVar(&cfg.Buffers, "buffers", 1, "buffers to allocate")
	fl.Uint32Var(&cfg.FirstHandle, "first-handle", 1, "handle of the first buffer (the VM's channels share its handles)")
	fl.IntVar(&cfg.Depth, "depth", 1, "MEMSETs kept in flight")
	fl.DurationVar(&cfg.Duration, "duration", 10*time.Second, "stop after this long; 0: no time limit (as when only --count is given)")
	fl.IntVar(&cfg.Count, "count", 0, "stop after this many completed MEMSETs (0: no count limit; with --duration 0 too: allocate and free only)")
	return cmd
}

func printMemset(w io.Writer, r workload.MemsetResult) {
	fmt.Fprintf(w, "memset on channel %d: %d buffers of %d bytes, %d memsets (%d bytes) in %v\n",
		r.Channel, r.Buffers, r.Size, r.Memsets, r.Bytes, time.Duration(r.ElapsedNs))
	if r.AllocError != "" {
		fmt.Fprintf(w, "an ALLOC was refused: %s\n", r.AllocError)
	}
	printSummary(w, "turnaround", r.TurnaroundNs)
}

func newLatencyCmd(g *globals) *cobra.Command {
	var (
		f   channelFlags
		cfg workload.LatencyConfig
	)
	cmd := &cobra.Command{
		Use:   "latency",
		Short: "NOP round trips: submit and doorbell until the host's completion is seen",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withChannel(cmd, g, &f, func(ch *sdk.Channel) (workload.LatencyResult, error) {
				return workload.Latency(cmd.Context(), ch, cfg)
			}, printLatency)
		},
	}
	f.add(cmd)
	cmd.Flags().IntVar(&cfg.Count, "count", 10000, "measured round trips")
	cmd.Flags().IntVar(&cfg.Warmup, "warmup", 100, "unmeasured round trips first")
	cmd.Flags().BoolVar(&cfg.Causes, "causes", false, "a diagnostic: class each round trip by what the guest saw "+
		"(slept, rang the doorbell, away from its CPU, yielded, spun) and report each class's distribution")
	return cmd
}

func printLatency(w io.Writer, r workload.LatencyResult) {
	fmt.Fprintf(w, "latency on channel %d: %d round trips in %v\n", r.Channel, r.Count, time.Duration(r.ElapsedNs))
	printSummary(w, "round trip", r.RoundTrip)
	for _, c := range r.Causes {
		printSummary(w, fmt.Sprintf("  %s: %d (%d slow)", c.Class, c.Count, c.Slow), c.RoundTrip)
	}
}

func printSummary(w io.Writer, what string, s workload.Summary) {
	d := func(ns int64) time.Duration { return time.Duration(ns) }
	fmt.Fprintf(w, "%s p50 %v  p90 %v  p99 %v  max %v  mean %v\n", what, d(s.P50), d(s.P90), d(s.P99), d(s.Max), d(s.Mean))
}
