package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/internal/cpuprofile"
	"github.com/sluice-gpu/sluice/mediator/bench"
	"github.com/sluice-gpu/sluice/mediator/bench/spec"
)

func newBenchCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run benchmark workload specs",
		Long: `Run benchmark workload specs (YAML, see bench/specs/) in this process on the
simulated GPU. These commands do not talk to sluiced.`,
		Example: `  sluicectl bench run bench/specs/fairness-dfq.yaml
  sluicectl bench run bench/specs/overhead-10us-loga.yaml --json`,
		Args: groupArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(newBenchRunCommand(a))
	return cmd
}

func newBenchRunCommand(a *app) *cobra.Command {
	var asJSON, native bool
	var rounds int
	cmd := &cobra.Command{
		Use:   "run SPEC",
		Short: "Run a workload spec on the simulated GPU (or a real one) and report what it measured",
		Long: `Run the workload spec in the file SPEC in-process on the simulated GPU: the
VMs' guests submit through shared-memory rings as real guests do, accounting
and scheduling run as in sluiced, and the sim's ground truth is compared with
what accounting charged. With clock virtual (the default) the run is
deterministic and takes a fraction of its simulated duration.

A spec with backend cuda runs on the GPU instead (wall clock), and then its
native baseline: the same kernels, lengths, depths and channels launched
straight through the driver API by one process with one context (a stream per
channel) and no mediator, printed beside Sluice's figures with the ratio
Sluice/native of kernels per second, per VM and in total ("native" in the
JSON). --native=false leaves it out. The sim has no native run.

The native loop's own rate varies between runs on one machine (by up to a
tenth), so a GPU spec runs --rounds rounds (default 3): each a whole Sluice
run and a whole native run, the order alternating from round to round. The
figures printed are the round with the median Sluice/native ratio, followed by
each round's and the medians with their spread ("interleaved" in the JSON:
kernels/s, native kernels/s, Sluice/native, added time per kernel). With
SLUICE_CUDA_HOPS the last round's hops are the ones written.

The summary and a table go to stdout; --json prints the whole result (times in
nanoseconds) instead. Warnings about the spec go to stderr.

Diagnostics (environment; for measuring, not for production):
  SLUICE_CUDA_HOPS=FILE            on a GPU spec, time each command at every hop
                                   of Sluice's path (Submit, GPU worker, kernel
                                   on %globaltimer, completer, callback, next
                                   Submit) and write the quantiles as JSON to
                                   FILE; the native baseline's loop writes its
                                   own to FILE.native.json
  SLUICE_NATIVE_STREAM_MARKERS=1   the native baseline puts each kernel's start
                                   and end markers on its stream as two
                                   cuStreamWriteValue64 (what a GPU worker does
                                   around a LAUNCH) instead of the kernel
                                   writing them: what the two memops cost
  SLUICE_CPU_PROFILE=FILE          write a Go CPU profile of the whole command
                                   (every round, Sluice's and native's runs; not
                                   the GPU workers) to FILE (go tool pprof reads
                                   it)`,
		Example: `  sluicectl bench run bench/specs/skew-dfq.yaml
  sluicectl bench run bench/specs/overhead-10us-neon.yaml --json | jq .vms`,
		Args: argsNamed("SPEC"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rounds < 1 {
				return usageErrorf("--rounds %d: want at least 1", rounds)
			}
			s, err := spec.Load(args[0])
			if err != nil {
				return err
			}
			for _, w := range s.Warnings() {
				fmt.Fprintf(cmd.ErrOrStderr(), "sluicectl: warning: %s\n", w)
			}
			if path := a.opts.Getenv("SLUICE_CPU_PROFILE"); path != "" {
				stop, err := cpuprofile.Start(path)
				if err != nil {
					return err
				}
				defer stop()
			}
			name := strings.TrimSuffix(filepath.Base(args[0]), filepath.Ext(args[0]))
			res, err := bench.Run(cmd.Context(), s, bench.Options{Name: name, NoNative: !native, Rounds: rounds})
			if err != nil {
				return fmt.Errorf("running %s: %w", args[0], err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			return bench.WriteText(cmd.OutOrStdout(), res)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().BoolVar(&native, "native", true, "on a GPU spec (backend cuda), also run the native baseline")
	cmd.Flags().IntVar(&rounds, "rounds", 3, "on a GPU spec with the native baseline, how many rounds of Sluice and native to interleave")
	return cmd
}
