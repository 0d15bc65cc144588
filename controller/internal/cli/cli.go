// Package cli owns sluicectl, the operator command line of Sluice: the cobra
// command tree, how errors become messages and exit codes, and the pure
// rendering of host API objects (tables, the top frame). It talks to sluiced
// only through api/hostapi.
//
// New command groups slot in as a newXxxCommand(a *app) added in
// newRootCommand; new vm verbs are added in newVMCommand.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/mediator/backend/cuda/cudacmd"
)

// Version is the client version, set at build time with
// -ldflags "-X github.com/sluice-gpu/sluice/controller/internal/cli.Version=v1.2.3".
var Version = "dev"

// Exit codes of sluicectl.
const (
	ExitOK    = 0 // success
	ExitError = 1 // the command failed; a message is on stderr
	ExitUsage = 2 // bad command line; a message and a hint are on stderr
)

// DefaultSocket is where sluiced listens unless told otherwise.
const DefaultSocket = "/run/sluice/sluiced.sock"

// SocketEnv names the environment variable that overrides DefaultSocket.
const SocketEnv = "SLUICE_SOCKET"

// Options are the process-level inputs of Run, injectable for tests.
type Options struct {
	Version    string               // client version; "": the package's Version
	Stdout     io.Writer            // nil: io.Discard
	Stderr     io.Writer            // nil: io.Discard
	Getenv     func(string) string  // nil: os.Getenv
	IsTerminal func(io.Writer) bool // nil: true only for a terminal *os.File
}

// app is the state shared by all commands of one invocation.
type app struct {
	opts   Options
	socket string
	fleet  fleetConn // sluice-controller, for the fleet commands
	host   hostConn  // sluiced over TCP, when --socket says tcp:// or tls://
}

// client is sluiced's host API client: over TCP when --socket names a TCP
// address (resolveHost built it), else on the UNIX socket.
func (a *app) client() *hostapi.Client {
	if a.host.client != nil {
		return a.host.client
	}
	return hostapi.NewClient(a.socket)
}

// Run executes sluicectl with args (without the program name) and returns
// the process exit code. Cancelling ctx (Ctrl-C) stops long-running commands
// such as top cleanly.
func Run(ctx context.Context, args []string, opts Options) int {
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.IsTerminal == nil {
		opts.IsTerminal = isTerminal
	}
	if opts.Version == "" {
		opts.Version = Version
	}
	a := &app{opts: opts}
	root := newRootCommand(a)
	root.SetArgs(args)
	root.SetOut(opts.Stdout)
	root.SetErr(opts.Stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code) // a guest command's status; it printed its own message
	}
	fmt.Fprintf(opts.Stderr, "sluicectl: %s\n", a.describe(err))
	var ue usageError
	if errors.As(err, &ue) {
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(opts.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return ExitUsage
	}
	return ExitError
}

func newRootCommand(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "sluicectl",
		Short: "Operate sluiced, the Sluice GPU mediator",
		Long: `sluicectl is the operator command line of Sluice, a hypervisor-level GPU
virtualization layer: many VMs share one GPU fairly, with exact per-VM
GPU-time accounting.

It talks to the mediator daemon sluiced over its UNIX socket: --socket, else
$` + SocketEnv + `, else ` + DefaultSocket + `. With --socket tcp://HOST:PORT
(or tls://HOST:PORT) it reaches sluiced's TCP host API instead, with the
token of --host-token-file (else $` + HostTokenFileEnv + `).

With a fleet controller (sluice-controller: --controller URL --token TOKEN,
else $` + ControllerEnv + ` and $` + TokenEnv + `, else controller: and token: in
the --config file), vm create/list/get/set/delete and vm move go to the
controller, and host, gpu, token, usage, events and whoami are its commands.

Environment (defaults of the flags named; flags win):
  ` + SocketEnv + `           --socket
  ` + HostTokenFileEnv + `  --host-token-file
  ` + ControllerEnv + `       --controller
  ` + TokenEnv + `            --token
  ` + ConfigEnv + `           --config
  ` + GuestImageEnv + `      --image of vm start and libvirt xml --domain

Durations are Go durations (500ms, 10s, 2m).
Exit status: 0 on success, 1 when the command failed, 2 on a usage error.`,
		Example: `  sluicectl vm create web --weight 2
  sluicectl vm list
  sluicectl vm set web --cap 25%
  sluicectl policy set cap
  sluicectl vm usage web --json
  sluicectl top
  SLUICE_SOCKET=/tmp/sluiced.sock sluicectl version
  sluicectl --socket tls://gpu1:7443 --host-token-file ~/.sluice/gpu1.token --host-ca ca.pem vm list
  sluicectl --controller http://ctl:7070 --token "$T" host list
  sluicectl --controller http://ctl:7070 --token "$T" usage --tenant acme --from 2026-11-01 --csv`,
		Args:          groupArgs,
		RunE:          groupRun,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	socket := a.opts.Getenv(SocketEnv)
	if socket == "" {
		socket = DefaultSocket
	}
	root.PersistentFlags().StringVar(&a.socket, "socket", socket,
		"path of sluiced's UNIX socket, or tcp://HOST:PORT or tls://HOST:PORT for its TCP host API (env "+SocketEnv+")")
	// --version prints "sluicectl VERSION" as every Sluice binary's does
	// (the version command asks sluiced too). Declared here so that cobra
	// adds no -v shorthand.
	root.Version = a.opts.Version
	root.Flags().Bool("version", false, "print sluicectl's version and exit (sluicectl version: sluiced's too)")
	root.SetVersionTemplate("sluicectl {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	a.addFleetFlags(root)
	a.addHostFlags(root)
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if err := a.resolveHost(); err != nil {
			return err
		}
		return a.resolveFleet()
	}
	root.AddCommand(newVMCommand(a), newPolicyCommand(a), newTopCommand(a), newVersionCommand(a), newBenchCommand(a), newLibvirtCommand(a))
	root.AddCommand(newHostCommand(a), newGPUCommand(a), newTokenCommand(a), newUsageCommand(a), newEventCommand(a), newWhoamiCommand(a))
	// bench on the cuda backend starts this binary again as its GPU workers
	// and the native runner.
	root.AddCommand(cudacmd.Commands()...)
	return root
}

func newVersionCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the versions of sluicectl and of the running sluiced",
		Long: `Print the version of this sluicectl, then ask sluiced for its version, the
shared-memory ABI it speaks, its GPU backend and clock, and its epoch (which
changes every time the daemon restarts, but not when it hands over to a
successor on SIGHUP: then it counts the hand-overs).`,
		Example: `  sluicectl version
  sluicectl --socket /tmp/sluiced.sock version`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "client: sluicectl %s\n", a.opts.Version)
			v, err := a.client().Version(cmd.Context())
			if err != nil {
				return fmt.Errorf("asking sluiced for its version: %w", err)
			}
			handed := ""
			if v.Handovers > 0 {
				handed = fmt.Sprintf(", hand-overs %d", v.Handovers)
			}
			fmt.Fprintf(out, "daemon: sluiced %s (ABI %d.%d, backend %s, clock %s, epoch %d%s)\n",
				clean(v.Version), v.ABIMajor, v.ABIMinor, clean(v.Backend), clean(v.Clock), v.Epoch, handed)
			return nil
		},
	}
}

// groupArgs rejects an unknown subcommand of a command group; cobra itself
// would run the group's help instead and exit 0.
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, set only on its own path
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		for i := range s {
			s[i] = strconv.Quote(s[i])
		}
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
	}
	return usageError{errors.New(msg)}
}

// groupRun is the action of a command group run without a subcommand.
func groupRun(cmd *cobra.Command, _ []string) error {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() && c.Name() != "help" && c.Name() != "completion" {
			names = append(names, c.Name())
		}
	}
	return usageErrorf("missing command after %q (one of: %s)", cmd.CommandPath(), strings.Join(names, ", "))
}

// argsNamed accepts exactly one non-empty positional argument per name.
func argsNamed(names ...string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < len(names) {
			return usageErrorf("missing argument %s", names[len(args)])
		}
		if len(args) > len(names) {
			return usageErrorf("unexpected argument %q", args[len(names)])
		}
		for i, arg := range args {
			if arg == "" {
				return usageErrorf("argument %s must not be empty", names[i])
			}
		}
		return nil
	}
}
