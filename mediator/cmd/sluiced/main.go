// Command sluiced is Sluice's host mediator: it creates per-VM endpoints
// (shared memory + ivshmem doorbell server), forwards the commands guests
// ring in to a GPU backend, accounts GPU time per VM, and serves the host API
// on a UNIX socket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/sluice-gpu/sluice/internal/cpuprofile"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/mediator/backend"
	_ "github.com/sluice-gpu/sluice/mediator/backend/cuda"
	_ "github.com/sluice-gpu/sluice/mediator/backend/null"
	_ "github.com/sluice-gpu/sluice/mediator/backend/sim"
	"github.com/sluice-gpu/sluice/mediator/internal/accounting"
	"github.com/sluice-gpu/sluice/mediator/internal/apiserver"
	"github.com/sluice-gpu/sluice/mediator/internal/daemon"
	"github.com/sluice-gpu/sluice/mediator/internal/fleetagent"
)

const usageText = `sluiced: Sluice's GPU mediator daemon.

Usage:
  sluiced [flags]

It listens on --socket for the host API (use sluicectl), creates one ivshmem
endpoint socket per VM under --endpoint-dir, and keeps the VM list and the
usage ledger (billing data) under --state-dir, so both survive a restart.
One sluiced at a time uses a state dir: it holds an flock on
STATE_DIR/sluiced.lock (with its pid in it) while it runs, and a second one
started on the same dir exits with an error naming the holder's pid.

Environment variables SLUICE_SOCKET, SLUICE_STATE_DIR, SLUICE_BACKEND and
SLUICE_CLOCK set the matching flags' defaults; flags win.

With --controller URL and a host token (--controller-token, or the
environment variable SLUICE_CONTROLLER_TOKEN), sluiced registers the host and
its GPUs (--controller-gpus) with sluice-controller, heartbeats, creates,
changes and deletes the VMs the controller places on it, and pushes their
usage as numbered intervals (at least once; the controller counts each once).
Its state is STATE_DIR/controller-agent.json.

Diagnostics (environment; for measuring, not for production):
  SLUICE_CPU_PROFILE=FILE        write a Go CPU profile of the daemon to FILE
                                 until it stops (go tool pprof reads it)
  SLUICE_SYSCALL_READY_MAP=off   the syscall pollers ignore the ready map
  SLUICE_SYSCALL_NULL_HERE=1     the syscall pollers answer null calls
                                 themselves (prices the hop to the proxy)

Examples:
  sluiced --socket /run/sluice/sluiced.sock --state-dir /var/lib/sluice --backend sim --clock wall
  sluiced --socket /tmp/s/sluiced.sock --state-dir /tmp/s/state --clock virtual

Flags:
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, logLevel, ctl, err := parseAll(args)
	if err == flag.ErrHelp {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluiced:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}))
	slog.SetDefault(log) // backends log through the default logger
	if path := os.Getenv("SLUICE_CPU_PROFILE"); path != "" {
		stop, err := cpuprofile.Start(path)
		if err != nil {
			log.Error("starting the CPU profile", "err", err)
			return 1
		}
		defer stop()
	}
	if err := serve(cfg, ctl, log); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}

func parseFlags(args []string) (daemon.Config, slog.Level, error) {
	cfg, lvl, _, err := parseAll(args)
	return cfg, lvl, err
}

// controllerFlags are the --controller* flags: how sluiced joins a fleet.
type controllerFlags struct {
	url, token, host, address, gpus string
	gpuMemory, sysfs                string // for GPUs discovered in sysfs, without --controller-gpus
	interval                        time.Duration
	metricsListen                   string // --metrics-listen; not a controller flag, but parsed with them
}

// agentConfig is the fleet agent's configuration, or ok false without
// --controller.
func (c controllerFlags) agentConfig(cfg daemon.Config, log *slog.Logger) (fleetagent.Config, bool, error) {
	if c.url == "" {
		return fleetagent.Config{}, false, nil
	}
	gpus, err := c.inventory(cfg.Backend, log)
	if err != nil {
		return fleetagent.Config{}, false, err
	}
	return fleetagent.Config{Controller: c.url, Token: c.token, Host: c.host, Address: c.address, Version: daemon.Version,
		GPUs: gpus, StatePath: filepath.Join(cfg.StateDir, "controller-agent.json"), Interval: c.interval, Log: log}, true, nil
}

// inventory is the GPU inventory reported to the controller: the declared
// one (--controller-gpus) wins; without it, the GPUs found in sysfs with
// --controller-gpu-memory each; none found (or sysfs unreadable): one GPU
// named after the backend with 1GiB, as before discovery.
func (c controllerFlags) inventory(backend string, log *slog.Logger) ([]controllerapi.GPUReport, error) {
	if c.gpus != "" {
		gpus, err := fleetagent.ParseGPUs(c.gpus)
		if err != nil {
			return nil, fmt.Errorf("--controller-gpus: %w", err)
		}
		return gpus, nil
	}
	mem, err := fleetagent.ParseSize(c.gpuMemory)
	if err != nil {
		return nil, fmt.Errorf("--controller-gpu-memory: %w", err)
	}
	gpus, err := fleetagent.DiscoverGPUs(c.sysfs, mem)
	if err != nil {
		log.Warn("reading the GPU inventory from sysfs failed; reporting the default one", "sysfs", c.sysfs, "err", err)
	}
	if len(gpus) > 0 {
		log.Info("GPU inventory read from sysfs", "sysfs", c.sysfs, "gpus", len(gpus), "memory_each", mem)
		return gpus, nil
	}
	return fleetagent.ParseGPUs(backend + ":1GiB")
}

func parseAll(args []string) (daemon.Config, slog.Level, controllerFlags, error) {
	cfg := daemon.DefaultConfig()
	var ctl controllerFlags
	fs := flag.NewFlagSet("sluiced", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Socket, "socket", env("SLUICE_SOCKET", cfg.Socket), "host API UNIX socket")
	fs.StringVar(&cfg.StateDir, "state-dir", env("SLUICE_STATE_DIR", cfg.StateDir), "directory for the VM list and the usage ledger")
	fs.StringVar(&cfg.EndpointDir, "endpoint-dir", "", "directory for the VMs' ivshmem sockets (default: vms/ beside --socket)")
	fs.StringVar(&cfg.Backend, "backend", env("SLUICE_BACKEND", cfg.Backend), "GPU backend: "+strings.Join(backend.Names(), ", "))
	fs.StringVar(&cfg.Clock, "clock", env("SLUICE_CLOCK", cfg.Clock), "backend clock: wall (real time) or virtual (simulated time, as fast as possible)")
	params := fs.String("backend-params", "", "backend options as key=value,key=value")
	mode := fs.String("socket-mode", "0660", "permission bits of every socket created (octal)")
	fs.IntVar(&cfg.Layout.Channels, "channels", cfg.Layout.Channels, "default channels per VM")
	fs.IntVar(&cfg.Layout.RingEntries, "ring-entries", cfg.Layout.RingEntries, "default ring entries per channel (power of two)")
	fs.Uint64Var(&cfg.Layout.RegionSize, "region-size", cfg.Layout.RegionSize, "default shared-memory region size per VM in bytes (power of two)")
	fs.IntVar(&cfg.MaxVMs, "max-vms", cfg.MaxVMs, "maximum number of VMs")
	fs.DurationVar(&cfg.MaxCommand, "max-command", cfg.MaxCommand,
		"longest command a VM may run (1ms..1h; sluicectl vm create/set --max-command sets one VM's): a longer THROTTLE fails with ETOOLONG, a command running past it with ETIMEDOUT (cuda: the VM's GPU worker is killed and restarted)")
	fs.StringVar(&cfg.Policy, "policy", cfg.Policy, "scheduling policy at start: none, dfq, cap, timeslice (sluicectl policy set changes it); none with --accounting off")
	fs.StringVar(&cfg.Arbitration, "arbitration", cfg.Arbitration,
		"who decides whose work is on the GPU: driver (every VM's at once; the driver time-slices, and overlapping time is split evenly in bills) or turns (one VM's at a time, for a quantum while others wait: exact bills and fairer shares, at some throughput when nobody over-uses; needs the wall clock)")
	fs.DurationVar(&cfg.Quantum, "quantum", cfg.Quantum, "under --arbitration turns, how long a turn lasts while another VM waits; it ends at a command boundary (0: 5ms)")
	method := fs.String("accounting", string(cfg.Accounting.Method),
		"how the scheduler learns each VM's GPU time: loga, loga-segment-average, or off (no poller, so no scheduling: only with --policy none, its default then); billing, from completions, goes on under every method; scheduling needs the wall clock")
	fs.Float64Var(&cfg.Accounting.Ratio, "poll-ratio", 0, "non-poll : poll phase length ratio (0: default 51, i.e. 1.9% polling)")
	fs.Int64Var(&cfg.Accounting.PollNs, "poll-ns", 0, "poll phase length per active channel in ns (0: default)")
	fs.StringVar(&cfg.Proxy.Binary, "proxy", env("SLUICE_PROXY", ""), "sluice-proxy binary serving each VM's GPU system calls (default: beside sluiced), or off")
	fs.StringVar(&cfg.Proxy.VolumeDir, "volume-dir", "", "directory of the VMs' default volumes (default: volumes/ in --state-dir)")
	fs.IntVar(&cfg.Proxy.MaxFiles, "proxy-max-files", cfg.Proxy.MaxFiles, "files one VM's proxy may hold open (its RLIMIT_NOFILE)")
	fs.Uint64Var(&cfg.Proxy.MaxFileSize, "proxy-max-file-size", cfg.Proxy.MaxFileSize, "largest file a VM's GPU programs may write, in bytes (0: no limit): its proxy's RLIMIT_FSIZE and the bound of its fastcall writes (EFBIG past it)")
	fs.DurationVar(&cfg.Syscalls.Window, "syscall-window", cfg.Syscalls.Window, "default coalescing window of GPU system calls (sluicectl vm set changes one VM's)")
	fs.IntVar(&cfg.Syscalls.Batch, "syscall-batch", cfg.Syscalls.Batch, "default most GPU system calls per batch to a proxy (1..1024)")
	fs.DurationVar(&cfg.InflightBudget, "inflight-budget", cfg.InflightBudget, "estimated GPU time a VM may keep queued on the device, at least one command (0: half the scheduling period; negative: no bound)")
	fs.DurationVar(&cfg.Syscalls.Spin, "syscall-spin", cfg.Syscalls.Spin, "how long a VM's syscall poller keeps scanning after the last call before it idles")
	hostname, _ := os.Hostname()
	fs.StringVar(&ctl.url, "controller", "", "URL of sluice-controller to join (register, heartbeat, apply its VMs, push usage); default none")
	fs.StringVar(&ctl.token, "controller-token", env("SLUICE_CONTROLLER_TOKEN", ""), "the controller's host token for --controller-host (prefer the environment variable)")
	fs.StringVar(&ctl.host, "controller-host", hostname, "this host's name at the controller")
	fs.StringVar(&ctl.address, "controller-address", hostname, "where operators reach this host, as the controller shows it")
	fs.StringVar(&ctl.gpus, "controller-gpus", "", "the GPU inventory reported to the controller: MODEL:SIZE,... (default: the GPUs read from --controller-sysfs, or with none, one GPU named after --backend with 1GiB)")
	fs.StringVar(&ctl.gpuMemory, "controller-gpu-memory", "1GiB", "without --controller-gpus, the memory reported for each GPU read from sysfs (sysfs does not tell it)")
	fs.StringVar(&ctl.sysfs, "controller-sysfs", "/sys", "without --controller-gpus, the sysfs mount the GPU inventory is read from")
	fs.DurationVar(&ctl.interval, "controller-interval", 10*time.Second, "how often to heartbeat, apply the controller's VMs and push usage")
	fs.StringVar(&ctl.metricsListen, "metrics-listen", "", "also serve GET /metrics on this TCP address (host:port) for Prometheus; default none (the host API socket serves it too)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return cfg, 0, ctl, err
	}
	if *version {
		fmt.Println("sluiced", daemon.Version)
		return cfg, 0, ctl, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return cfg, 0, ctl, fmt.Errorf("unexpected arguments %q (see --help)", fs.Args())
	}
	if ctl.url != "" {
		if ctl.token == "" {
			return cfg, 0, ctl, errors.New("--controller needs --controller-token (or SLUICE_CONTROLLER_TOKEN)")
		}
		if ctl.host == "" {
			return cfg, 0, ctl, errors.New("--controller needs --controller-host (the host name is unknown)")
		}
		if ctl.interval < 100*time.Millisecond {
			return cfg, 0, ctl, errors.New("--controller-interval: at least 100ms")
		}
		if ctl.gpus != "" {
			if _, err := fleetagent.ParseGPUs(ctl.gpus); err != nil {
				return cfg, 0, ctl, fmt.Errorf("--controller-gpus: %w", err)
			}
		} else if _, err := fleetagent.ParseSize(ctl.gpuMemory); err != nil {
			return cfg, 0, ctl, fmt.Errorf("--controller-gpu-memory: %w", err)
		}
	}
	var err error
	if cfg.Accounting.Method, err = accounting.ParseMethod(*method); err != nil {
		return cfg, 0, ctl, err
	}
	if cfg.Accounting.Method == accounting.MethodOff && !flagSet(fs, "policy") {
		cfg.Policy = "none" // nothing to schedule on; --policy dfq with it is refused
	}
	if cfg.BackendParams, err = daemon.ParseParams(*params); err != nil {
		return cfg, 0, ctl, err
	}
	m, err := strconv.ParseUint(*mode, 8, 32)
	if err != nil || m > 0o777 {
		return cfg, 0, ctl, fmt.Errorf("--socket-mode %q: want octal permission bits like 0660", *mode)
	}
	cfg.SocketMode = uint32(m)
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return cfg, 0, ctl, fmt.Errorf("--log-level %q: %w", *level, err)
	}
	return cfg, lvl, ctl, cfg.Validate()
}

// flagSet says whether the command line gave the flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func serve(cfg daemon.Config, ctl controllerFlags, log *slog.Logger) error {
	agentCfg, joinFleet, err := ctl.agentConfig(cfg, log)
	if err != nil {
		return err
	}
	d, err := daemon.New(cfg)
	if err != nil {
		return err
	}
	srv, err := apiserver.Listen(cfg.Socket, os.FileMode(cfg.SocketMode), apiserver.Handler(d))
	if err != nil {
		d.Close()
		return err
	}
	if ctl.metricsListen != "" {
		stopMetrics, err := serveMetrics(ctl.metricsListen, d, log)
		if err != nil {
			srv.Shutdown(context.Background())
			d.Close()
			return err
		}
		defer stopMetrics()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	agentDone := make(chan struct{})
	if joinFleet {
		agent, err := fleetagent.New(agentCfg, d)
		if err != nil {
			srv.Shutdown(context.Background())
			d.Close()
			return err
		}
		go func() { defer close(agentDone); agent.Run(ctx) }()
	} else {
		close(agentDone)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	log.Info("ready", "socket", cfg.Socket, "backend", cfg.Backend, "clock", cfg.Clock,
		"state_dir", cfg.StateDir, "endpoint_dir", cfg.EndpointDir, "epoch", fmt.Sprintf("%#x", d.Epoch()))

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var serveErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case serveErr = <-errc:
			break loop
		case <-tick.C:
			if err := d.Heartbeat(); err != nil {
				log.Warn("persisting usage", "err", err)
			}
		}
	}
	log.Info("shutting down")
	stop()
	<-agentDone // its last sync is done before the daemon closes
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("stopping host api", "err", err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("closing: %w", err)
	}
	return serveErr
}
