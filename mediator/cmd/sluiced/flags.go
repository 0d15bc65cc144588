package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluice-gpu/sluice/internal/cmdline"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/internal/accounting"
	"github.com/sluice-gpu/sluice/mediator/internal/daemon"
	"github.com/sluice-gpu/sluice/mediator/internal/fleetagent"
)

// options are sluiced's command line: the daemon's config, the fleet
// agent's flags and the flags that need converting (finish).
type options struct {
	getenv func(string) string
	cfg    daemon.Config
	ctl    controllerFlags
	level  slog.Level

	params, socketMode, method, logLevel string
	poll                                 time.Duration
	// handoverFD is the memfd of the hand-over manifest a predecessor
	// passed (--handover-fd, hidden); 0: a fresh start.
	handoverFD int
}

func newOptions(getenv func(string) string) *options {
	return &options{getenv: getenv, cfg: daemon.DefaultConfig()}
}

// env is the SLUICE_* variable's value, else def.
func (o *options) env(key, def string) string { return cmdline.Env(o.getenv, key, def) }

// addFlags declares sluiced's flags, a line each.
func (o *options) addFlags(fs *pflag.FlagSet) {
	cfg, ctl := &o.cfg, &o.ctl
	fs.SortFlags = false
	fs.StringVar(&cfg.Socket, "socket", o.env("SLUICE_SOCKET", cfg.Socket), "host API UNIX socket (env SLUICE_SOCKET)")
	fs.StringVar(&cfg.StateDir, "state-dir", o.env("SLUICE_STATE_DIR", cfg.StateDir), "directory for the VM list and the usage ledger (env SLUICE_STATE_DIR)")
	fs.StringVar(&cfg.EndpointDir, "endpoint-dir", "", "directory for the VMs' ivshmem sockets (default: vms/ beside --socket)")
	fs.StringVar(&cfg.Backend, "backend", o.env("SLUICE_BACKEND", cfg.Backend), "GPU backend: "+strings.Join(backend.Names(), ", ")+" (env SLUICE_BACKEND)")
	fs.StringVar(&cfg.Clock, "clock", o.env("SLUICE_CLOCK", cfg.Clock), "backend clock: wall (real time) or virtual (simulated time, as fast as possible) (env SLUICE_CLOCK)")
	fs.StringVar(&o.params, "backend-params", "", "backend options as key=value,key=value")
	fs.StringVar(&o.socketMode, "socket-mode", "0660", "permission bits of every socket created (octal)")
	fs.IntVar(&cfg.Layout.Channels, "channels", cfg.Layout.Channels, "default channels per VM")
	fs.IntVar(&cfg.Layout.RingEntries, "ring-entries", cfg.Layout.RingEntries, "default ring entries per channel (power of two)")
	fs.Uint64Var(&cfg.Layout.RegionSize, "region-size", cfg.Layout.RegionSize, "default shared-memory region size per VM in bytes (power of two)")
	fs.IntVar(&cfg.MaxVMs, "max-vms", cfg.MaxVMs, "maximum number of VMs")
	fs.DurationVar(&cfg.JournalInterval, "journal-interval", cfg.JournalInterval, "how often each VM's usage since the last commit goes to the usage journal (STATE_DIR/usage.journal.0 and .1, folded into usage.json every second and at start): a kill -9 loses at most this much of each VM's GPU time (0: no journal, usage.json alone, once a second; at most 1s)")
	fs.DurationVar(&cfg.MaxCommand, "max-command", cfg.MaxCommand,
		"longest command a VM may run (1ms..1h; sluicectl vm create/set --max-command sets one VM's): a longer THROTTLE fails with ETOOLONG, a command running past it with ETIMEDOUT (cuda: the VM's GPU worker is killed and restarted)")
	fs.StringVar(&cfg.Policy, "policy", cfg.Policy, "scheduling policy at start: none, dfq, cap, timeslice (sluicectl policy set changes it); none with --accounting off")
	fs.StringVar(&cfg.Arbitration, "arbitration", cfg.Arbitration,
		"who decides whose work is on the GPU: driver (every VM's at once; the driver time-slices, and overlapping time is split evenly in bills) or turns (one VM's at a time, for a quantum while others wait: exact bills and fairer shares, at some throughput when nobody over-uses) or auto (turns while at least two VMs each had work outstanding 90% of the last scheduling period under policy dfq or cap, driver otherwise); turns and auto need the wall clock (default: auto, which follows the policy set at run time, or driver with accounting off or the virtual clock)")
	fs.DurationVar(&cfg.Quantum, "quantum", cfg.Quantum, "under --arbitration turns (or auto), how long a turn lasts while another VM waits; it ends at a command boundary (0: 5ms)")
	fs.DurationVar(&cfg.Handoff, "handoff", cfg.Handoff, "under --arbitration turns (or auto), release the next VM when the holder's last work ends within this at the latest, so that its first commands queue behind it on the GPU (0: 50µs; negative: off, the turn passes when the holder drained; at most 1ms)")
	fs.StringVar(&o.method, "accounting", string(cfg.Accounting.Method),
		"how the scheduler learns each VM's GPU time: loga, loga-segment-average, or off (no poller, so no scheduling: only with --policy none, its default then); billing, from completions, goes on under every method; scheduling needs the wall clock")
	fs.Float64Var(&cfg.Accounting.Ratio, "poll-ratio", 0, "non-poll : poll phase length ratio (0: default 51, i.e. 1.9% polling)")
	fs.DurationVar(&o.poll, "poll", time.Duration(accounting.DefaultPollNs), "poll phase length per active channel (0: the default)")
	o.addPollNs(fs)
	fs.StringVar(&cfg.Proxy.Binary, "proxy", o.env("SLUICE_PROXY", ""), "sluice-proxy binary serving each VM's GPU system calls (default: beside sluiced), or off (env SLUICE_PROXY)")
	fs.StringVar(&cfg.Proxy.VolumeDir, "volume-dir", "", "directory of the VMs' default volumes (default: volumes/ in --state-dir)")
	fs.IntVar(&cfg.Proxy.MaxFiles, "proxy-max-files", cfg.Proxy.MaxFiles, "files one VM's proxy may hold open (its RLIMIT_NOFILE)")
	fs.Uint64Var(&cfg.Proxy.MaxFileSize, "proxy-max-file-size", cfg.Proxy.MaxFileSize, "largest file a VM's GPU programs may write, in bytes (0: no limit): its proxy's RLIMIT_FSIZE and the bound of its fastcall writes (EFBIG past it)")
	fs.DurationVar(&cfg.Syscalls.Window, "syscall-window", cfg.Syscalls.Window, "default coalescing window of GPU system calls (sluicectl vm set changes one VM's)")
	fs.IntVar(&cfg.Syscalls.Batch, "syscall-batch", cfg.Syscalls.Batch, "default most GPU system calls per batch to a proxy (1..1024)")
	fs.DurationVar(&cfg.InflightBudget, "inflight-budget", cfg.InflightBudget, "estimated GPU time a VM may keep queued on the device, at least one command (0: half the scheduling period; negative: no bound)")
	fs.DurationVar(&cfg.DoorbellSpin.Window, "doorbell-spin", cfg.DoorbellSpin.Window, "longest a VM's doorbell goroutine busy-polls its rings after a doorbell that brought work (the window adapts up to it; 0: off; at most 1ms)")
	fs.Float64Var(&cfg.DoorbellSpin.Cores, "doorbell-spin-cores", cfg.DoorbellSpin.Cores, "CPU all VMs' doorbell spinning may use together, in cores")
	fs.IntVar(&cfg.DoorbellLimit, "doorbell-limit", cfg.DoorbellLimit, "doorbell signals a second from one VM before its doorbells are muted for 1 ms and its rings read at that pace (a storm limit; 0: none)")
	fs.DurationVar(&cfg.Syscalls.Spin, "syscall-spin", cfg.Syscalls.Spin, "how long a VM's syscall poller keeps scanning after the last call before it idles")
	hostname, _ := os.Hostname()
	fs.StringVar(&ctl.url, "controller", "", "URL of sluice-controller to join (register, heartbeat, apply its VMs, push usage); default none")
	fs.StringVar(&ctl.token, "controller-token", o.env("SLUICE_CONTROLLER_TOKEN", ""), "the controller's host token for --controller-host (prefer the environment variable SLUICE_CONTROLLER_TOKEN)")
	fs.StringVar(&ctl.host, "controller-host", hostname, "this host's name at the controller")
	fs.StringVar(&ctl.address, "controller-address", hostname, "where operators reach this host, as the controller shows it")
	fs.StringVar(&ctl.gpus, "controller-gpus", "", "the GPUs this daemon drives, as reported to the controller: MODEL:SIZE[@PCI_ADDRESS],... (default: the backend's GPU, e.g. the CUDA device with its memory and PCI address); each is merged with its PCI function in --controller-sysfs")
	fs.StringVar(&ctl.gpuMemory, "controller-gpu-memory", "1GiB", "the memory reported for a GPU whose memory neither the backend nor --controller-gpus tells (the sim's)")
	fs.StringVar(&ctl.sysfs, "controller-sysfs", "/sys", "the sysfs mount the GPUs' PCI data (address, NUMA node, driver, IOMMU group, SR-IOV) is read from")
	fs.DurationVar(&ctl.interval, "controller-interval", 10*time.Second, "how often to heartbeat, apply the controller's VMs and push usage")
	fs.StringVar(&cfg.HostTCP.Addr, "listen", "", "also serve the host API on this TCP address (host:port), every request with the bearer token of --listen-token-file; default none (the UNIX socket alone)")
	fs.StringVar(&cfg.HostTCP.TokenFile, "listen-token-file", o.env("SLUICE_HOST_TOKEN_FILE", ""), "with --listen: file holding the token (one line, 16 bytes or more, not readable by every user; read again on SIGHUP, which hands over to a successor that reads it at start) (env SLUICE_HOST_TOKEN_FILE)")
	fs.StringVar(&cfg.HostTCP.CertFile, "tls-cert", "", "with --listen: the server's TLS certificate (PEM); without it the token crosses the network in clear")
	fs.StringVar(&cfg.HostTCP.KeyFile, "tls-key", "", "with --listen: the TLS certificate's key (PEM)")
	fs.StringVar(&cfg.HostTCP.ClientCAFile, "tls-client-ca", "", "with --listen and TLS: clients must also present a certificate signed by these CAs (PEM; mutual TLS)")
	fs.StringVar(&ctl.metricsListen, "metrics-listen", "", "also serve GET /metrics on this TCP address (host:port) for Prometheus; default none (the host API socket serves it too)")
	fs.DurationVar(&cfg.HandoverWait, "handover-wait", cfg.HandoverWait, "on SIGHUP (a hand-over to a successor sluiced), how long the commands in flight get to complete; those still running then run again in the successor (0..1m)")
	fs.IntVar(&o.handoverFD, "handover-fd", 0, "the hand-over manifest's fd, from the sluiced that exec'd this one")
	_ = fs.MarkHidden("handover-fd")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
}

// addPollNs keeps --poll-ns, which settings files (sluiced.env) may still
// hold, working as a deprecated spelling of --poll in nanoseconds.
func (o *options) addPollNs(fs *pflag.FlagSet) {
	fs.Var(nsDuration{&o.poll}, "poll-ns", "poll phase length in ns")
	_ = fs.MarkHidden("poll-ns")
}

// nsDuration is a duration given as an integer of nanoseconds (--poll-ns).
type nsDuration struct{ d *time.Duration }

func (n nsDuration) String() string { return strconv.FormatInt(int64(*n.d), 10) }
func (n nsDuration) Type() string   { return "int" }
func (n nsDuration) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "sluiced: warning: --poll-ns is deprecated: use --poll, a duration such as 500us")
	*n.d = time.Duration(v)
	return nil
}

// finish converts and checks what the flags said.
func (o *options) finish(fs *pflag.FlagSet) error {
	if err := o.ctl.check(); err != nil {
		return err
	}
	cfg := &o.cfg
	var err error
	if cfg.Accounting.Method, err = accounting.ParseMethod(o.method); err != nil {
		return err
	}
	if cfg.Accounting.Method == accounting.MethodOff && !fs.Changed("policy") {
		cfg.Policy = "none" // nothing to schedule on; --policy dfq with it is refused
	}
	if o.poll < 0 {
		return fmt.Errorf("--poll %v: negative", o.poll)
	}
	cfg.Accounting.PollNs = int64(o.poll)
	if cfg.BackendParams, err = daemon.ParseParams(o.params); err != nil {
		return err
	}
	m, err := strconv.ParseUint(o.socketMode, 8, 32)
	if err != nil || m > 0o777 {
		return fmt.Errorf("--socket-mode %q: want octal permission bits like 0660", o.socketMode)
	}
	cfg.SocketMode = uint32(m)
	if err := o.level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: %w", o.logLevel, err)
	}
	return cfg.Validate()
}

// check refuses --controller without what joining needs.
func (c controllerFlags) check() error {
	if c.url == "" {
		return nil
	}
	switch {
	case c.token == "":
		return errors.New("--controller needs --controller-token (or SLUICE_CONTROLLER_TOKEN)")
	case c.host == "":
		return errors.New("--controller needs --controller-host (the host name is unknown)")
	case c.interval < 100*time.Millisecond:
		return errors.New("--controller-interval: at least 100ms")
	}
	if c.gpus != "" {
		if _, err := fleetagent.ParseDeclared(c.gpus); err != nil {
			return fmt.Errorf("--controller-gpus: %w", err)
		}
	}
	if _, err := fleetagent.ParseSize(c.gpuMemory); err != nil {
		return fmt.Errorf("--controller-gpu-memory: %w", err)
	}
	return nil
}
