package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/internal/sockfile"
	"github.com/sluice-gpu/sluice/mediator/internal/accounting"
	"github.com/sluice-gpu/sluice/mediator/internal/apiserver"
	"github.com/sluice-gpu/sluice/mediator/internal/engine"
	"github.com/sluice-gpu/sluice/mediator/internal/gate"
	"github.com/sluice-gpu/sluice/mediator/internal/sched"
	"github.com/sluice-gpu/sluice/mediator/internal/spin"
	"github.com/sluice-gpu/sluice/mediator/internal/syscalls"
	"github.com/sluice-gpu/sluice/mediator/internal/vm"
)

// Config is sluiced's configuration. Every field documents its default;
// flags override environment variables, which override defaults.
type Config struct {
	// Socket is the host API's UNIX socket. Default /run/sluice/sluiced.sock.
	Socket string
	// HostTCP serves the host API on a TCP address too, each request
	// authorised by a bearer token (apiserver.TCPConfig; optional TLS and
	// client certificates). Default: no TCP listener.
	HostTCP apiserver.TCPConfig
	// EndpointDir holds the VMs' ivshmem sockets (NAME.sock). Default: a
	// "vms" folder beside Socket.
	EndpointDir string
	// StateDir holds what survives restarts: the VM list and the usage
	// ledger. Default /var/lib/sluice.
	StateDir string
	// JournalInterval is the usage journal's group commit: every interval
	// the GPU time each VM used since the last commit is appended to
	// STATE_DIR/usage.journal.0 or .1 with one write, which survives a
	// killed sluiced at once, and fdatasync'ed behind it; so a kill -9
	// loses at most about an interval of billing. Default 5ms; 0: no
	// journal, the ledger is flushed once a second only; at most 1s.
	JournalInterval time.Duration
	// Backend names the GPU backend. Default "sim".
	Backend string
	// Clock is the backend's time base: "wall" (default) or "virtual".
	Clock string
	// BackendParams are backend-specific key=value options.
	BackendParams map[string]string
	// SocketMode is the permission of every socket the daemon creates.
	// Default 0660 (libvirt's qemu user must reach endpoint sockets).
	SocketMode uint32
	// Layout is the default region geometry of new VMs (abi defaults).
	Layout abi.LayoutConfig
	// Limits bound every VM's commands (abi defaults); Validate sets
	// MaxThrottleNs to MaxCommand.
	Limits abi.Limits
	// MaxCommand is the longest command a VM may run unless it has its own
	// (vm create/set --max-command): its longest THROTTLE, and how long any
	// of its commands may run on the GPU before the backend ends the VM's
	// work with abi.ErrTimedOut (cuda: its watchdog kills the VM's GPU
	// worker). Default 500ms; hostapi.MinMaxCommand..MaxMaxCommand.
	MaxCommand time.Duration
	// MaxVMs caps the number of endpoints. Default 256.
	MaxVMs int
	// MaxPeers caps guest peers per endpoint. Default 4.
	MaxPeers int
	// Policy is the scheduling policy at start (none, dfq, cap, timeslice).
	// Default dfq. A policy set at run time is persisted and wins.
	Policy string
	// Accounting configures the poller the scheduler runs on (method loga
	// by default). "off" starts no poller, so nothing is scheduled: it
	// needs policy none (Validate refuses another, as `sluicectl bench`
	// does). Billing (the usage ledger, from completion timestamps) goes
	// on under every method. Scheduling runs with the wall clock only: on
	// the virtual clock the daemon accounts from completions and
	// `sluicectl bench` is the place for scheduled what-if runs.
	Accounting accounting.Config
	// InflightBudget is every VM's in-flight budget: the estimated GPU time
	// it may keep forwarded to the backend and not completed (at least one
	// command), which makes the scheduler's holds bind work already queued.
	// 0 (default): half the scheduling period (twice the dfq
	// threshold); negative: no bound. No VM is bounded under policy none.
	InflightBudget time.Duration
	// Arbitration is who decides whose work is on the GPU: "driver"
	// (every VM the scheduler does not hold forwards at once, and the
	// GPU's driver time-slices between their contexts) or "turns" (one VM
	// at a time has work on the GPU; docs/architecture.md, "Accounting and
	// scheduling") or "auto" (turns while at least two VMs are backlogged
	// under a policy that shares the GPU, driver otherwise, switched at
	// period boundaries). Turns and auto need the wall clock. Default ""
	// (ResolvedArbitration): auto, which follows the policy set at run
	// time, or driver where nothing is scheduled (accounting off or the
	// virtual clock: engine.Default).
	Arbitration string
	// Quantum is how long a turn lasts once another VM waits, before the
	// holder is latched and drains (0: gate.DefaultQuantum, 5ms).
	Quantum time.Duration
	// Handoff is the turns' hand-off threshold: the next holder is released
	// when the latched holder's work in flight ends within it at the
	// latest, so that its first commands queue on the GPU behind the
	// holder's last ones (0: gate.DefaultHandoff, 50µs; negative: off, the
	// turn passes when the holder drained; at most gate.MaxHandoff).
	Handoff time.Duration
	// Syscalls is every new VM's syscall forwarder tuning (coalescing window
	// 0, batch 256, spin 200µs, idle scan 1ms); `sluicectl vm set` changes
	// one VM's window and batch at run time.
	Syscalls syscalls.Config
	// Proxy is how the VMs' syscall proxies run.
	Proxy ProxyConfig
	// DoorbellSpin is how long each VM's doorbell goroutine busy-polls the
	// VM's rings after a doorbell or a completion instead of sleeping
	// (Window: the longest, adaptive, default 50µs, 0 off, at most 1ms),
	// and the CPU all VMs together may spend so (Cores, default 1).
	DoorbellSpin spin.Config
	// DoorbellLimit is the most doorbells a second read from one VM: a VM
	// ringing faster has the vector muted 1ms at a time (its commands are
	// still forwarded, from the ring). Default 200000; 0: no limit.
	DoorbellLimit int
	// HandoverWait is how long a hand-over to a successor (Handover)
	// waits for the commands in flight to complete; those still running
	// then run again in the successor. Default 1s, at most 1m.
	HandoverWait time.Duration
	// FDStore, optional, keeps every VM's descriptors outside the process
	// (systemd's fd store) so that a daemon started after a crash takes
	// the VMs and their guests over (AdoptStore). Default none.
	FDStore vm.FDStore
}

// ProxyConfig configures the per-VM sluice-proxy processes.
type ProxyConfig struct {
	// Binary is the sluice-proxy executable. Default: sluice-proxy in the
	// directory of sluiced's own binary. "off" serves no VM's syscall area
	// (guests see FeatureSyscalls clear).
	Binary string
	// VolumeDir holds the VMs' default volumes (NAME/). Default
	// STATE_DIR/volumes.
	VolumeDir string
	// MaxFiles is each proxy's RLIMIT_NOFILE: the files a VM's GPU programs
	// may hold open at once, over all its contexts. Default 256.
	MaxFiles int
	// MaxFileSize is each VM's file size limit in bytes: its proxy's
	// RLIMIT_FSIZE and the bound of its fastcall writes, which sluiced runs
	// (EFBIG past it, both). Default 0: none.
	MaxFileSize uint64
}

// DefaultJournalInterval is Config.JournalInterval's default.
const DefaultJournalInterval = 5 * time.Millisecond

// DefaultDoorbellLimit is Config.DoorbellLimit's default: far above what a
// guest that waits for its work rings (a NOP round trip a µs apart is a
// million a second, but a spinning host reads the ring without them).
const DefaultDoorbellLimit = 200_000

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Socket:     "/run/sluice/sluiced.sock",
		StateDir:   "/var/lib/sluice",
		Backend:    "sim",
		Clock:      "wall",
		SocketMode: 0o660,
		Layout:     abi.DefaultLayoutConfig(),
		Limits:     abi.DefaultLimits(),
		MaxCommand: time.Duration(abi.DefaultLimits().MaxThrottleNs),
		MaxVMs:     256,
		MaxPeers:   4,
		Policy:     "dfq",
		Accounting: accounting.Config{Method: accounting.MethodLoga},
		Syscalls:   syscalls.DefaultConfig(),
		Proxy:      ProxyConfig{MaxFiles: 256},

		DoorbellSpin:  spin.DefaultConfig(),
		DoorbellLimit: DefaultDoorbellLimit,

		JournalInterval: DefaultJournalInterval,
		HandoverWait:    time.Second,
	}
}

// Validate fills derived defaults and rejects impossible settings.
func (c *Config) Validate() error {
	if c.Socket == "" {
		return fmt.Errorf("config: socket path is empty")
	}
	if err := c.HostTCP.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if c.EndpointDir == "" {
		c.EndpointDir = filepath.Join(filepath.Dir(c.Socket), "vms")
	}
	if c.StateDir == "" {
		return fmt.Errorf("config: state dir is empty")
	}
	if c.JournalInterval < 0 || c.JournalInterval > time.Second {
		return fmt.Errorf("config: journal interval %v: want 0 (no journal) to 1s", c.JournalInterval)
	}
	if err := sockfile.CheckPath(c.Socket); err != nil {
		return fmt.Errorf("config: the host API's %w", err)
	}
	// Even a VM of a one-letter name must have room for its endpoint.
	if err := sockfile.CheckPath(filepath.Join(c.EndpointDir, "x.sock")); err != nil {
		return fmt.Errorf("config: the endpoint dir %s leaves no room for a VM's endpoint: %w", c.EndpointDir, err)
	}
	if c.Clock != "wall" && c.Clock != "virtual" {
		return fmt.Errorf("config: clock %q: want wall or virtual", c.Clock)
	}
	if _, err := abi.NewLayout(c.Layout); err != nil {
		return fmt.Errorf("config: default layout: %w", err)
	}
	if err := checkMaxCommand(int64(c.MaxCommand)); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	c.Limits.MaxThrottleNs = uint64(c.MaxCommand)
	if c.MaxVMs < 1 || c.MaxPeers < 1 {
		return fmt.Errorf("config: max vms and max peers must be positive")
	}
	if _, err := sched.ParsePolicy(c.Policy); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	a, err := gate.ParseArbitration(c.Arbitration)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if c.Arbitration != "" && a != gate.ArbitrationDriver && c.Clock != "wall" {
		return fmt.Errorf("config: arbitration %s needs the wall clock (sluicectl bench runs it on a virtual one)", a)
	}
	if c.Quantum < 0 || c.Quantum > time.Minute {
		return fmt.Errorf("config: quantum %v: want 0 (default %v) to 1m", c.Quantum, gate.DefaultQuantum)
	}
	if c.Handoff > gate.MaxHandoff {
		return fmt.Errorf("config: hand-off %v: want negative (off), 0 (default %v) or up to %v", c.Handoff, gate.DefaultHandoff, gate.MaxHandoff)
	}
	if c.Accounting.Method == accounting.MethodNeonSampling {
		return fmt.Errorf("config: accounting %q is a benchmark baseline (sluicectl bench), not for the daemon", c.Accounting.Method)
	}
	if err := c.Accounting.Validate(); err != nil {
		return fmt.Errorf("config: accounting: %w", err)
	}
	if err := checkAccountingPolicy(c.Accounting.Method, c.Policy); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := c.Syscalls.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := c.DoorbellSpin.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if c.HandoverWait < 0 || c.HandoverWait > time.Minute {
		return fmt.Errorf("config: hand-over wait %v: want 0 to 1m", c.HandoverWait)
	}
	if c.DoorbellLimit < 0 {
		return fmt.Errorf("config: doorbell limit %d a second: want 0 (none) or more", c.DoorbellLimit)
	}
	if c.Proxy.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("config: finding sluice-proxy beside this binary: %w", err)
		}
		c.Proxy.Binary = filepath.Join(filepath.Dir(exe), "sluice-proxy")
	}
	if c.Proxy.Binary != "off" {
		if _, err := os.Stat(c.Proxy.Binary); err != nil {
			return fmt.Errorf("config: the syscall proxy: %w (build it with make sluice-proxy, or pass --proxy off)", err)
		}
	}
	if c.Proxy.VolumeDir == "" {
		c.Proxy.VolumeDir = filepath.Join(c.StateDir, "volumes")
	}
	if c.Proxy.MaxFiles < 16 || c.Proxy.MaxFiles > 1<<20 {
		return fmt.Errorf("config: proxy max files %d: want 16..%d", c.Proxy.MaxFiles, 1<<20)
	}
	return nil
}

// ResolvedArbitration is the daemon's arbitration: the one named, or
// where none is, engine.Default's. It does not depend on the scheduling
// policy at (re)start: a policy set at run time (persisted, and in force
// after a restart or a hand-over) would otherwise fix the arbitration, and
// auto alone follows a later change of policy.
func (c *Config) ResolvedArbitration() gate.Arbitration {
	if c.Arbitration != "" {
		return gate.Arbitration(c.Arbitration)
	}
	return engine.Default(c.Accounting.Method != accounting.MethodOff && c.Clock == "wall")
}

// checkAccountingPolicy refuses a scheduling policy that accounting off
// cannot feed: without the poller no period ends, so the policy would
// never act (the bench refuses the same spec).
func checkAccountingPolicy(m accounting.Method, policy string) error {
	if m == accounting.MethodOff && policy != string(sched.PolicyNone) {
		return fmt.Errorf("accounting off cannot feed policy %s (use policy none, or an accounting method)", policy)
	}
	return nil
}

// checkMaxCommand refuses a longest command outside the host API's range.
func checkMaxCommand(ns int64) error {
	if ns < int64(hostapi.MinMaxCommand) || ns > int64(hostapi.MaxMaxCommand) {
		return fmt.Errorf("longest command %v: want %v to %v: %w", time.Duration(ns), hostapi.MinMaxCommand, hostapi.MaxMaxCommand, hostapi.ErrInvalid)
	}
	return nil
}

// ParseParams parses "k=v,k2=v2" backend parameters.
func ParseParams(s string) (map[string]string, error) {
	m := map[string]string{}
	if s == "" {
		return m, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("backend parameter %q: want key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}
