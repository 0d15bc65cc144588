package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

// clearScreen moves the cursor home and clears the screen, so that each
// frame replaces the last on a terminal.
const clearScreen = "\x1b[H\x1b[2J"

func newTopCommand(a *app) *cobra.Command {
	var interval, duration, window time.Duration
	var once bool
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live per-VM view of GPU time, shares and rates",
		Long: `Show a live per-VM view computed from successive /v1/stats snapshots taken
--interval apart:

  GPU TIME     cumulative GPU busy time of the VM
  GPU%         the VM's GPU busy time in the interval / length of the interval
  SHARE        the VM's GPU busy time / all VMs' GPU busy time in the interval
  ACCT%        GPU time accounting charged the VM / all it charged in the
               interval: the share the scheduler acts on (compare with SHARE)
  HELD         time the scheduler held the VM's doorbells in the interval /
               length of the interval; "yes" or "no" (held now or not) for a
               VM without a baseline
  KERNELS/S    kernels completed per second; KERNELS and ERRORS are cumulative
  DOORBELLS/S  doorbells rung by the guest per second
  SYSCALLS/S   GPU system calls the VM's programs made per second
  PROXY CPU    CPU time of the VM's syscall proxy over the interval, in % of a core
  MEMORY       device memory the VM holds now (buffers; on a GPU modules and
               kernels' local memory too), and its quota after a
               "/" where it has one (vm create/set --memory)
  IN FLIGHT    estimated GPU time the VM has forwarded to the GPU and not
               completed now / its in-flight budget ("-": none)
  EST          what one of the VM's kernels or copies is costed at in the
               budget now ("-": none measured yet, such a command goes alone)
  TIMEOUTS     the VM's commands that ran past its longest command (the
               backend ended its GPU work each time), cumulative

The header shows the backend, its clock, the interval and the GPU utilisation
(all GPU busy time in the interval / length of the interval); then the
scheduling policy, the accounting method, and the CPU the accounting poller
used (its CPU time in the interval / length of the interval, in % of one
core).

Intervals and rates are measured on the backend's clock (the daemon's
Stats.Now), not on this machine's: with a virtual clock (a simulated backend)
"per second" means per simulated second (and poller CPU is per simulated
second too), and --interval only sets how often sluicectl samples. A "-"
marks a value with no baseline yet (a VM created during the interval) or none
at all (no GPU work, so no SHARE; nothing charged, so no ACCT%).

On a terminal the view refreshes in place; otherwise frames are printed one
after another, separated by a blank line, for pipes and logs. Ctrl-C exits.

With --controller (or SLUICE_CONTROLLER, or the config file) it shows the
whole fleet from sluice-controller instead: the hosts (state, GPUs, VMs, last
heartbeat; an operator's token) and every VM the token may see (host, GPU,
weight, cap) with its GPU% (GPU time / --window), GPU TIME and KERNELS/S over
the last --window of usage its host reported (REPORTED: the end of that
window, which trails the clock by the hosts' push period). --once prints one
frame at once.`,
		Example: `  sluicectl top
  sluicectl top --interval 500ms
  sluicectl top --once
  sluicectl top --duration 30s --interval 5s > top.log
  sluicectl --controller https://ctl.example:7443 --token "$T" top --window 30s`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return usageErrorf("--interval must be positive")
			}
			if duration < 0 {
				return usageErrorf("--duration must not be negative")
			}
			if once && cmd.Flags().Changed("duration") {
				return usageErrorf("--once and --duration cannot be used together")
			}
			frames := 0 // forever
			if once {
				frames = 1
			} else if duration > 0 {
				frames = max(1, int(duration/interval))
			}
			if a.fleetMode() {
				if window <= 0 {
					return usageErrorf("--window must be positive")
				}
				return a.runFleetTop(cmd.Context(), cmd.OutOrStdout(), interval, window, frames)
			}
			if cmd.Flags().Changed("window") {
				return usageErrorf("--window needs a controller: give --controller URL")
			}
			return a.runTop(cmd.Context(), cmd.OutOrStdout(), interval, frames)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&window, "window", time.Minute,
		"with --controller: the stretch of each VM's reported usage its rates are over, e.g. 30s")
	f.DurationVar(&interval, "interval", time.Second, "time between two samples, e.g. 500ms, 2s")
	f.BoolVar(&once, "once", false, "sample twice, --interval apart, print one frame and exit")
	f.DurationVar(&duration, "duration", 0,
		"stop after this long (duration/interval frames, at least one), e.g. 30s; 0 runs until Ctrl-C")
	return cmd
}

// runTop prints frames (0: until ctx is done). Cancellation is a clean exit,
// not an error: it is how Ctrl-C ends top.
func (a *app) runTop(ctx context.Context, out io.Writer, interval time.Duration, frames int) error {
	c := a.client()
	prev, err := c.Stats(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("sampling stats: %w", err)
	}
	term := a.opts.IsTerminal(out)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 0; frames == 0 || n < frames; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, err := c.Stats(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("sampling stats: %w", err)
		}
		sep := ""
		if term {
			sep = clearScreen
		} else if n > 0 {
			sep = "\n"
		}
		if _, err := io.WriteString(out, sep+RenderTopFrame(prev, cur)); err != nil {
			return fmt.Errorf("writing frame: %w", err)
		}
		prev = cur
	}
	return nil
}
