// Command sluiced is Sluice's host mediator: it creates per-VM endpoints
// (shared memory + ivshmem doorbell server), forwards the commands guests
// ring in to a GPU backend, accounts GPU time per VM, and serves the host API
// on a UNIX socket.
package main

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/internal/cmdline"
	"github.com/sluice-gpu/sluice/internal/cpuprofile"
	_ "github.com/sluice-gpu/sluice/mediator/backend/cuda"
	"github.com/sluice-gpu/sluice/mediator/backend/cuda/cudacmd"
	_ "github.com/sluice-gpu/sluice/mediator/backend/null"
	_ "github.com/sluice-gpu/sluice/mediator/backend/sim"
	"github.com/sluice-gpu/sluice/mediator/internal/daemon"
)

const longHelp = `sluiced is Sluice's GPU mediator daemon.

It listens on --socket for the host API (use sluicectl), creates one ivshmem
endpoint socket per VM under --endpoint-dir, and keeps the VM list and the
usage ledger (billing data) under --state-dir, so both survive a restart.
One sluiced at a time uses a state dir: it holds an flock on
STATE_DIR/sluiced.lock (with its pid in it) while it runs, and a second one
started on the same dir exits with an error naming the holder's pid.

With --controller URL and a host token (--controller-token, or the
environment variable SLUICE_CONTROLLER_TOKEN), sluiced registers the host and
its GPUs (--controller-gpus) with sluice-controller, heartbeats, creates,
changes and deletes the VMs the controller places on it, and pushes their
usage as numbered intervals (at least once; the controller counts each once).
Its state is STATE_DIR/controller-agent.json.

With --listen ADDR it also serves the host API over TCP, every request with
the bearer token of --listen-token-file (sluicectl --socket tcp://ADDR
--host-token-file FILE), over TLS with --tls-cert and --tls-key.

SIGHUP hands the daemon over to a successor without disturbing the VMs: it
quiesces them (--handover-wait for the commands in flight), then runs its
binary on disk again (an upgrade takes over) with their shared memory,
endpoint sockets, guests' connections and eventfds, and the host API
socket; the guests see a pause, not a disconnect, and no command is lost
or billed twice (system calls a VM's proxy held fail with EIO: the
successor starts the proxies again). The successor reads the
--listen-token-file at start; a SIGHUP that cannot hand over (logged)
reads it again instead.

Under systemd (NOTIFY_SOCKET set; see deploy/systemd/sluiced.service)
sluiced keeps the same descriptors in the service manager's fd store, and
the sim backend's device files (a VM's buffers and modules): a
sluiced started after a crash, or by systemctl restart (SIGTERM then leaves
the VMs to the store instead of disconnecting their guests), takes the VMs
over from it; VMs that serve system calls through a proxy excepted (their
guests reconnect; --proxy off avoids it).

Environment (defaults of the flags named; flags win):
  SLUICE_SOCKET            --socket
  SLUICE_STATE_DIR         --state-dir
  SLUICE_BACKEND           --backend
  SLUICE_CLOCK             --clock
  SLUICE_PROXY             --proxy
  SLUICE_CONTROLLER_TOKEN  --controller-token
  SLUICE_HOST_TOKEN_FILE   --listen-token-file

Diagnostics (environment; for measuring, not for production):
  SLUICE_CPU_PROFILE=FILE        write a Go CPU profile of the daemon to FILE
                                 until it stops (go tool pprof reads it)
  SLUICE_SYSCALL_READY_MAP=off   the syscall pollers ignore the ready map
  SLUICE_SYSCALL_NULL_HERE=1     the syscall pollers answer null calls
                                 themselves (prices the hop to the proxy)
  SLUICE_CUDA_HOPS=FILE          the cuda backend times each command at every
                                 hop (Submit, GPU worker, kernel, completer,
                                 callback) and writes the quantiles as JSON
                                 to FILE when it closes
  SLUICE_SPIN_TRACE=DIR          each VM's doorbell goroutine times the gaps
                                 between its looks at the rings while it
                                 spins and writes their quantiles as JSON to
                                 DIR/spin-VM.json when its doorbells stop

Durations are Go durations: 500us, 5ms, 1.5s, 10m.
Exit status: 0 after a clean stop, 1 when the daemon failed, 2 on a bad
command line.`

const examples = `  sluiced --socket /run/sluice/sluiced.sock --state-dir /var/lib/sluice --backend sim --clock wall
  sluiced --socket /tmp/s/sluiced.sock --state-dir /tmp/s/state --clock virtual
  sluiced --backend cuda --max-command 250ms --poll 500us`

func main() { os.Exit(run(os.Args[1:])) }

// run runs sluiced with args and returns its exit status.
func run(args []string) int {
	o := newOptions(os.Getenv)
	root := newRoot(o, func(o *options) error { return daemonMain(o, os.Stderr) })
	return cmdline.Execute(context.Background(), root, args, os.Stdout, os.Stderr)
}

// newRoot is sluiced's command line: the daemon (action, once the flags in
// o are checked) and the hidden roles the cuda backend starts it as.
func newRoot(o *options, action func(*options) error) *cobra.Command {
	root := cmdline.NewRoot(&cobra.Command{
		Use:     "sluiced",
		Short:   "Sluice's GPU mediator daemon",
		Long:    longHelp,
		Example: examples,
		RunE:    cmdline.Checked(o.finish, func(context.Context) error { return action(o) }),
	}, daemon.Version)
	o.addFlags(root.Flags())
	root.AddCommand(cudacmd.Commands()...)
	return root
}

// parseAll parses args as sluiced would, without starting it.
func parseAll(args []string) (daemon.Config, slog.Level, controllerFlags, error) {
	o := newOptions(os.Getenv)
	root := newRoot(o, func(*options) error { return nil })
	root.SetArgs(args)
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	err := root.Execute()
	return o.cfg, o.level, o.ctl, err
}

func parseFlags(args []string) (daemon.Config, slog.Level, error) {
	cfg, lvl, _, err := parseAll(args)
	return cfg, lvl, err
}

// daemonMain runs the daemon; a failure is logged and ends it with status 1.
func daemonMain(o *options, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.level}))
	slog.SetDefault(log) // backends log through the default logger
	if path := os.Getenv("SLUICE_CPU_PROFILE"); path != "" {
		stop, err := cpuprofile.Start(path)
		if err != nil {
			log.Error("starting the CPU profile", "err", err)
			return cmdline.ExitCode(cmdline.ExitError)
		}
		defer stop()
	}
	stored, err := fdStore(&o.cfg)
	if err != nil {
		log.Error("reading the descriptors systemd passed", "err", err)
		return cmdline.ExitCode(cmdline.ExitError)
	}
	var m *daemon.Manifest
	if o.handoverFD != 0 {
		mf, err := readManifest(o.handoverFD)
		if err != nil {
			log.Error("taking over from the predecessor", "err", err)
			return cmdline.ExitCode(cmdline.ExitError)
		}
		m = &mf
	}
	if err := serve(o.cfg, o.ctl, log, start{handover: m, stored: stored}); err != nil {
		log.Error("stopped", "err", err)
		return cmdline.ExitCode(cmdline.ExitError)
	}
	return nil
}
