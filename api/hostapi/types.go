// Package hostapi is the contract of the mediator's host API: JSON over HTTP
// on a UNIX socket (and later TCP). It holds the request and response types
// and a client; the server lives in the mediator. openapi.yaml beside this
// file is the same contract for other languages.
//
// Routes (all under /v1):
//
//	GET    /v1/version            Version
//	POST   /v1/vms                CreateVMRequest -> VM (201)
//	GET    /v1/vms                []VM
//	GET    /v1/vms/{name}         VM
//	DELETE /v1/vms/{name}         204
//	GET    /v1/vms/{name}/usage   Usage
//	PATCH  /v1/vms/{name}         UpdateVMRequest -> VM
//	GET    /v1/policy             PolicyState
//	PUT    /v1/policy             PolicyState -> PolicyState
//	GET    /v1/stats              Stats
//
// Errors come back as a non-2xx status with an Error body; Code is one of the
// Code* constants and maps to the sentinel errors below.
package hostapi

import "time"

// VM states.
const (
	StateWaiting   = "waiting"   // endpoint up, no guest connected
	StateConnected = "connected" // a guest peer is connected
)

// CreateVMRequest asks for a new VM endpoint. Zero fields take defaults.
type CreateVMRequest struct {
	Name        string  `json:"name"`
	Weight      uint32  `json:"weight,omitempty"`       // MinWeight..MaxWeight, default 1
	Cap         float64 `json:"cap,omitempty"`          // (0, 1], for policy cap; default none
	Channels    int     `json:"channels,omitempty"`     // default 4
	RingEntries int     `json:"ring_entries,omitempty"` // default 256
	RegionSize  uint64  `json:"region_size,omitempty"`  // bytes, power of two, default 4 MiB
	// Volume is the host directory the VM's GPU system calls see as "/" (its
	// sluice-proxy's root) and its QEMU guest mounts over virtio-9p; default
	// STATE_DIR/volumes/NAME. Created if missing.
	Volume string `json:"volume,omitempty"`
	// NetNS names a network namespace (/run/netns/NAME) the VM's proxy joins
	// for socket calls; default none: an isolated namespace of its own.
	NetNS string `json:"netns,omitempty"`
	// Cgroup is a cgroup v2 directory the VM's proxy runs in, so that the CPU
	// its system calls use is charged to the VM; default none.
	Cgroup string `json:"cgroup,omitempty"`
	// Memory is the VM's device memory quota in bytes: an ALLOC,
	// LOAD_MODULE or LAUNCH that would take the VM past it (its buffers,
	// and on a GPU its modules and its kernels' local memory) fails with
	// the channel error ErrNoMemory.
	// Default none: the device's capacity is the only bound.
	Memory uint64 `json:"memory,omitempty"`
	// MaxCommandNs is the longest command the VM may run, in ns
	// (MinMaxCommand..MaxMaxCommand): its longest THROTTLE (longer: the
	// channel error ErrTooLong), and the longest any command may run on the
	// GPU before the backend ends the VM's work with ErrTimedOut (cuda: its
	// GPU worker killed and restarted, its device memory lost). Default:
	// the daemon's (sluiced --max-command), which it follows when that
	// changes.
	MaxCommandNs int64 `json:"max_command_ns,omitempty"`
	// Owner is the user whose processes may open the VM's endpoint (its
	// QEMU's, or a process guest's), besides root and the daemon's own
	// user: "UID" or "UID:GID", numbers or names the daemon resolves on its
	// host ("libvirt-qemu:kvm"); with a GID the peer's gid must match too.
	// Default none: only root and the daemon's user. The daemon keeps it
	// in numbers (VM.Owner).
	Owner string `json:"owner,omitempty"`
}

// The range of a VM's longest command (max_command_ns, sluiced
// --max-command).
const (
	MinMaxCommand = time.Millisecond
	MaxMaxCommand = time.Hour
)

// UpdateVMRequest changes a running VM's share, system-call batching,
// memory quota, longest command or owner. Absent fields stay as they are; a share
// applies from the scheduler's next period.
type UpdateVMRequest struct {
	Weight *uint32  `json:"weight,omitempty"` // MinWeight..MaxWeight
	Cap    *float64 `json:"cap,omitempty"`    // (0, 1]: hard maximum share under policy cap; 0 clears it
	// SyscallWindowNs is the GPU system calls' coalescing window (0..1s);
	// SyscallBatch the most calls per batch to the proxy (1..1024). Both
	// apply to the next batch.
	SyscallWindowNs *int64 `json:"syscall_window_ns,omitempty"`
	SyscallBatch    *int   `json:"syscall_batch,omitempty"`
	// Memory is the VM's new device memory quota in bytes; 0 removes it.
	// It applies to the next command that takes memory; a quota below
	// what the VM holds takes nothing back, it refuses those until the VM
	// has freed enough.
	Memory *uint64 `json:"memory,omitempty"`
	// MaxCommandNs is the VM's new longest command in ns
	// (MinMaxCommand..MaxMaxCommand); 0 returns it to the daemon's default.
	// It applies to the next records the VM submits, and to the commands
	// running on a GPU (cuda) too.
	MaxCommandNs *int64 `json:"max_command_ns,omitempty"`
	// Owner is the VM's new owner (as in CreateVMRequest); "" removes it.
	// It applies to the connections that follow: guests connected stay.
	Owner *string `json:"owner,omitempty"`
}

// Scheduling policies.
const (
	PolicyNone      = "none"      // accounting only
	PolicyDFQ       = "dfq"       // disengaged fair queuing (default)
	PolicyCap       = "cap"       // hard maximum shares; may idle the GPU
	PolicyTimeslice = "timeslice" // engaged round robin, a baseline
)

// PolicyState is the GPU's scheduling policy and accounting method.
type PolicyState struct {
	Policy     string `json:"policy"`
	Accounting string `json:"accounting,omitempty"` // read only: set at daemon start
}

// VM describes one VM endpoint.
type VM struct {
	Name        string  `json:"name"`
	ID          uint32  `json:"id"`
	Weight      uint32  `json:"weight"`
	Cap         float64 `json:"cap"` // 0: none
	Channels    int     `json:"channels"`
	RingEntries int     `json:"ring_entries"`
	RegionSize  uint64  `json:"region_size"`
	HeapSize    uint64  `json:"heap_size"`
	Memory      uint64  `json:"memory"`      // device memory quota in bytes; 0: none
	MemoryUsed  uint64  `json:"memory_used"` // device memory the VM's buffers hold now
	// MaxCommandNs is the longest command the VM may run (its own or the
	// daemon's default); Timeouts, how often one of its commands ran past
	// it and the backend ended its work (cuda: the watchdog killed its GPU
	// worker), since its endpoint started.
	MaxCommandNs int64 `json:"max_command_ns"`
	Timeouts     int64 `json:"timeouts"`
	// The VM's in-flight budget (docs/architecture.md, "Accounting and
	// scheduling"): InflightBudgetNs is the estimated GPU time it may keep
	// forwarded to the backend and not completed, beyond one command (0:
	// no bound); InflightNs the estimated time forwarded and not completed
	// now; EstimateNs what one of its LAUNCH, MEMSET or COPY commands is
	// costed at now (0: none measured yet, such a command goes alone);
	// BudgetStalls how often one of its channels stopped for lack of room.
	InflightBudgetNs int64  `json:"inflight_budget_ns"`
	InflightNs       int64  `json:"inflight_ns"`
	EstimateNs       int64  `json:"estimate_ns"`
	BudgetStalls     uint64 `json:"budget_stalls"`
	Endpoint         string `json:"endpoint"` // ivshmem server socket for QEMU or a process guest
	// Owner is who besides root and the daemon's user may open the
	// endpoint, "UID" or "UID:GID" ("": nobody else); RefusedPeers counts
	// the connections refused since the endpoint started.
	Owner        string       `json:"owner,omitempty"`
	RefusedPeers PeerRefusals `json:"refused_peers"`
	Volume       string       `json:"volume,omitempty"` // the VM's system-call root, shared with its guest over 9p
	// Syscalls is the VM's GPU system calls (nil: the VM serves none).
	Syscalls *SyscallStats `json:"syscalls,omitempty"`
	Vectors  int           `json:"vectors"` // MSI vectors the ivshmem device needs
	State    string        `json:"state"`
	Peers    int           `json:"peers"`
	Created  time.Time     `json:"created"`

	// DoorbellsLimited counts the doorbells the VM's guests rang while the
	// vector was muted for ringing over the daemon's doorbell limit (they
	// were taken in one read per mute, their commands forwarded all the
	// same), since the endpoint started.
	DoorbellsLimited uint64 `json:"doorbells_limited"`
}

// PeerRefusals counts the connections to a VM's endpoint closed before they
// joined, by why.
type PeerRefusals struct {
	Foreign     uint64 `json:"foreign"`      // from a user that may not open it (CreateVMRequest.Owner)
	NoHandshake uint64 `json:"no_handshake"` // did not read the handshake in time, or gave up their slot unread
	Full        uint64 `json:"full"`         // every peer slot held by a guest that joined
	Other       uint64 `json:"other"`        // the connection failed during the handshake
}

// Usage is a VM's cumulative use of the GPU. It is billing data: it survives
// mediator restarts and counts from Since.
type Usage struct {
	Name     string    `json:"name"`
	GPUNs    uint64    `json:"gpu_ns"`   // GPU busy time of the VM's commands
	Kernels  uint64    `json:"kernels"`  // THROTTLE and LAUNCH commands completed
	Commands uint64    `json:"commands"` // all commands completed, kernels included
	Errors   uint64    `json:"errors"`   // commands failed and records rejected
	Since    time.Time `json:"since"`
}

// ChannelStats is the host's view of one channel.
type ChannelStats struct {
	Index     int    `json:"index"`
	State     string `json:"state"` // idle, busy, held, failed
	InFlight  uint32 `json:"in_flight"`
	Error     string `json:"error,omitempty"`
	ErrorCode uint32 `json:"error_code,omitempty"`
	// Wakes counts the signals sent to a guest asleep on the channel's
	// wake word (abi.FeatureWake).
	Wakes uint64 `json:"wakes"`
}

// VMStats is one VM's line in Stats.
type VMStats struct {
	VM
	Usage        Usage          `json:"usage"`
	Doorbells    uint64         `json:"doorbells"`
	Wakes        uint64         `json:"wakes"` // signals to sleeping guests, all channels
	ChannelStats []ChannelStats `json:"channel_stats"`
	// Dispatch is the time from a record's doorbell to its forwarding to
	// the GPU (a scheduler's hold shows here); Turnaround to its
	// completion. All channels, since the VM started.
	Dispatch   Histogram `json:"dispatch"`
	Turnaround Histogram `json:"turnaround"`
	// What accounting and the scheduler see (zero with accounting off):
	AccountedNs int64   `json:"accounted_ns"` // GPU time charged by the poller, extrapolated
	Share       float64 `json:"share"`        // share of the GPU in the last poll phase
	Held        bool    `json:"held"`         // doorbells latched now
	HeldNs      int64   `json:"held_ns"`      // total time held
	LagNs       int64   `json:"lag_ns"`       // virtual time ahead of the slowest active VM
	// TurnHolder: under arbitration turns, the VM holds the turn (its work
	// alone is on the GPU).
	TurnHolder bool `json:"turn_holder,omitempty"`
}

// SyscallStats counts a VM's GPU system calls since its endpoint started.
type SyscallStats struct {
	Calls         map[string]uint64 `json:"calls"`  // by call name; "fastcall", "unknown"
	Errnos        map[string]uint64 `json:"errnos"` // by errno name; "OK" for success
	InFlight      int               `json:"in_flight"`
	Batches       uint64            `json:"batches"`
	NonBlocking   uint64            `json:"non_blocking"`
	Fastcalls     uint64            `json:"fastcalls"`
	Raced         uint64            `json:"raced"` // slots the guest rewrote between copy and take
	Lost          uint64            `json:"lost"`  // results the guest's rewrites kept out
	ProxyState    string            `json:"proxy_state"`
	ProxyPID      int               `json:"proxy_pid,omitempty"`
	ProxyCPUNs    int64             `json:"proxy_cpu_ns"`
	ProxyRestarts uint64            `json:"proxy_restarts"`
	WindowNs      int64             `json:"window_ns"`
	Batch         int               `json:"batch"`
	// The poller's view: scan passes over the slots and their time, and the
	// blocking calls finished with their time from the scan that saw them
	// READY to FINISHED written (the host's share of a round trip).
	ScanPasses   uint64 `json:"scan_passes"`
	ScanNs       int64  `json:"scan_ns"`
	Served       uint64 `json:"served"`
	ServiceNs    int64  `json:"service_ns"`
	ServiceMaxNs int64  `json:"service_max_ns"`
	// PollerBusyNs is the time the poller was awake (spinning or working):
	// the host core it held. Served calls per second of it is what one
	// poller core serves.
	PollerBusyNs int64 `json:"poller_busy_ns"`
	// The request ring: calls read from it, entries that named no slot of
	// the area (dropped), positions claimed and never written (skipped).
	RingCalls   uint64 `json:"ring_calls"`
	RingBad     uint64 `json:"ring_bad"`
	RingSkipped uint64 `json:"ring_skipped"`
}

// Stats is a snapshot for live views: sample it twice and divide the deltas
// by the difference of Now.
type Stats struct {
	Backend     string `json:"backend"`
	Clock       string `json:"clock"`
	Policy      string `json:"policy"`
	Accounting  string `json:"accounting"`
	PollerCPUNs int64  `json:"poller_cpu_ns"` // CPU time the accounting poller used
	Periods     int64  `json:"periods"`       // scheduling periods so far
	// Arbitration is who decides whose work is on the GPU: "driver" (every
	// VM's at once, the driver time-slices) or "turns" (one VM's at a time;
	// sluiced --arbitration). Under turns: the quantum, the holder's name
	// (empty while nobody holds the turn) and the turns granted so far.
	Arbitration string `json:"arbitration,omitempty"`
	QuantumNs   int64  `json:"quantum_ns,omitempty"`
	TurnHolder  string `json:"turn_holder,omitempty"`
	Turns       uint64 `json:"turns,omitempty"`
	// TurnOverruns counts the turns passed beside a holder command that
	// ran far past its turn, where the GPU time-slices between VMs.
	TurnOverruns uint64 `json:"turn_overruns,omitempty"`
	// ArbitrationAuto: sluiced --arbitration auto (the default under
	// policies dfq and cap), which switches between driver and turns at
	// period boundaries (Arbitration is the one in force);
	// ArbitrationSwitches counts its switches.
	ArbitrationAuto     bool      `json:"arbitration_auto,omitempty"`
	ArbitrationSwitches uint64    `json:"arbitration_switches,omitempty"`
	Now                 int64     `json:"now_ns"`      // the backend's clock
	GPUBusyNs           uint64    `json:"gpu_busy_ns"` // sum over VMs
	VMs                 []VMStats `json:"vms"`
}

// Version identifies the daemon.
type Version struct {
	Version  string `json:"version"`
	ABIMajor int    `json:"abi_major"`
	ABIMinor int    `json:"abi_minor"`
	Backend  string `json:"backend"`
	Clock    string `json:"clock"`
	Epoch    uint64 `json:"epoch"`
	// Handovers counts the hand-overs to a successor sluiced (SIGHUP)
	// since the daemon started afresh; the epoch stays across them.
	Handovers uint32 `json:"handovers,omitempty"`
}

// Histogram is a latency distribution: Counts[i] latencies above
// BoundsNs[i-1] and at most BoundsNs[i]; the last count, one more than the
// bounds, has no upper bound.
type Histogram struct {
	BoundsNs []int64  `json:"bounds_ns"`
	Counts   []uint64 `json:"counts"`
	SumNs    uint64   `json:"sum_ns"`
	Count    uint64   `json:"count"`
}
