// Package backend is the contract between the mediator and a GPU: the
// mediator forwards validated commands to a Backend and learns of their
// completion; the accounting poller reads which channels the GPU is running.
// Nothing above this package knows which GPU (simulated or CUDA) it drives.
//
// Backends register themselves by name (Register) and are opened with Open.
// Abilities beyond the core (reading the running-channel state) are separate
// interfaces, found by type assertion.
package backend

import (
	"errors"

	"github.com/sluice-gpu/sluice/api/abi"
)

// Sentinel errors of this package.
var (
	ErrUnknownBackend = errors.New("unknown backend")
	ErrInvalid        = errors.New("invalid backend option")
	ErrClosed         = errors.New("backend closed")
)

// Backend is one GPU.
type Backend interface {
	// Attach creates a VM's context on the GPU (on a real GPU: a context of
	// its own, for address-space isolation, and a stream per channel).
	Attach(spec VMSpec) (VM, error)
	// Clock is the time base of every timestamp this backend reports.
	Clock() Clock
	// Close detaches every VM and releases the GPU.
	Close() error
}

// VMSpec describes a VM to Attach.
type VMSpec struct {
	ID       uint32 // unique among the backend's attached VMs
	Name     string
	Channels int
	// Heap is the VM's heap in shared memory, in the guest's hands: the
	// backend copies from and to it (or registers it for DMA) and must never
	// read a control value out of it.
	Heap []byte
	// HeapFile, when not nil, names the file the heap is mapped from (a
	// memfd): a backend that serves the VM from another process (the cuda
	// backend's per-VM GPU worker) maps the heap there from it. The backend
	// neither keeps nor closes the descriptor.
	HeapFile *FileRange
	// Syscalls is the VM's syscall area (ABI 1.1; nil when the VM has no
	// slots): the bitmap page and the slots, which GPU programs of the VM
	// write (a LAUNCH relocation of kind abi.RelocSyscall points at it) and
	// the mediator's syscall forwarder serves. Like the heap, it is hostile.
	Syscalls []byte
	// SyscallFile is the file Syscalls is mapped from, for a backend that
	// serves the VM from another process (nil with Syscalls).
	SyscallFile *FileRange
	// RingHead, when not nil, is the mediator's request ring head
	// (abi.FeatureSyscallRing): the position a claim counter the backend
	// creates for the VM must start from. A backend that creates one again
	// (the cuda backend, when it restarts a VM's GPU worker) asks it then,
	// so that new calls land where the mediator reads; and a backend that
	// refuses a kept state (Adopt) asks it only once what it refused has
	// ended: the answer then counts the calls it made meanwhile.
	RingHead func() uint64
	// MaxInFlight bounds the commands one channel has submitted and not yet
	// completed (the channel ring's entries); 0 means DefaultMaxInFlight. A
	// Submit beyond it is refused.
	MaxInFlight int
	// MemoryQuota bounds the device memory the VM's buffers (and, on a
	// GPU, modules) may hold at once, in bytes; 0 is no bound but the device's. A backend whose VMs
	// do not implement MemoryQuota cannot enforce one: the mediator refuses
	// a quota rather than attach to it.
	MemoryQuota uint64
	// MaxCommandNs is the longest a command of the VM may run on the GPU,
	// in ns; 0 is no limit. A command that runs longer fails with
	// abi.ErrTimedOut (see CommandLimit). The mediator also refuses a
	// THROTTLE longer than it (abi.Limits.MaxThrottleNs).
	MaxCommandNs int64
	// Adopt, when not nil, is device state a predecessor process kept
	// for the VM (Keeper): Attach checks it and attaches the VM with it,
	// or fails with ErrBadKept. A backend without Keeper ignores it.
	Adopt *Kept
	// Store, when not nil, keeps descriptors of the VM's device state
	// outside the mediator process (the service manager's fd store), for
	// a successor started after a crash: a backend whose device state
	// lives in another process (the cuda backend's GPU worker) stores
	// what adopting it takes there as long as it lives.
	Store DeviceStore
	// Complete is called exactly once for every command submitted, in
	// submission order within a channel, from a backend goroutine. It must
	// not block; it may call Submit.
	Complete func(Completion)
}

// FileRange is a stretch of an open file: a descriptor and an offset in it.
type FileRange struct {
	FD     int
	Offset int64
}

// DefaultMaxInFlight is VMSpec.MaxInFlight's default.
const DefaultMaxInFlight = 1024

// VM is one VM's context on a backend.
type VM interface {
	// Submit queues a validated command on a channel, behind the channel's
	// earlier commands. It does not wait for the GPU. tag comes back in the
	// Completion. An error means the command was not queued and no
	// Completion will follow.
	Submit(channel int, cmd abi.Command, tag uint64) error
	// Close completes every queued command with abi.ErrShutdown, waits for
	// the running ones and frees the VM's device memory.
	Close() error
}

// MemoryQuota is implemented by a VM whose backend counts its device
// memory (sim and cuda; null, which allocates nothing). A command that would take the VM
// past its quota (an ALLOC; on the cuda backend a LOAD_MODULE too, whose
// globals, constants and code take device memory, and a LAUNCH whose
// kernel's local memory grows the context's) fails with
// abi.ErrNoMemory; the VM and the others go on. FREE gives the buffer's
// bytes back; a module holds its bytes as long as the VM's context.
type MemoryQuota interface {
	// SetMemoryQuota sets the quota (0: none but the device's). It applies
	// to the commands that take memory after it; a quota below what the VM
	// holds takes nothing back, and the VM takes no more until it has
	// freed enough to be under it.
	SetMemoryQuota(bytes uint64)
	// MemoryUsed is the device memory the VM holds now, in bytes: its
	// buffers, and on the cuda backend its modules and local memory.
	MemoryUsed() uint64
}

// CommandLimit is implemented by a VM whose backend bounds how long one of
// its commands may run (sim and cuda; null, whose commands take no time). A
// command that runs past the limit fails with abi.ErrTimedOut: the sim
// fails the command and drops the VM's buffers and modules; cuda's watchdog
// kills the VM's GPU worker, which fails every command the VM had in flight
// and loses its context, and starts a fresh one. Other VMs do not notice.
type CommandLimit interface {
	// SetMaxCommand sets the limit in ns (0: none) for the commands that
	// start after it (cuda: for those running too).
	SetMaxCommand(ns int64)
	// Timeouts is how often the limit ended the VM's work.
	Timeouts() int64
}

// Deadline is how long a command may run under a limit of lim ns before it
// is ended with abi.ErrTimedOut: a quarter more, so that a command at the
// limit (a THROTTLE of abi.Limits.MaxThrottleNs, which the mediator
// accepts) is never ended for what a backend adds to it (a GPU's context
// switches in a command's share). Every backend ends commands there (the
// sim's a MEMSET or COPY whose host movement outruns it on the wall clock:
// it ends when moved, see its package doc).
func Deadline(lim int64) int64 { return lim + lim/4 }

// Completion reports one command's end.
type Completion struct {
	Channel int
	Tag     uint64
	Op      abi.Opcode
	Code    abi.ErrorCode // OK, or why the command failed
	// Start and End bound the command's execution on the GPU on the
	// backend's Clock; both are zero for a command that never ran.
	Start, End int64
	// GPUNs, when not zero, is the GPU time the backend attributes to the
	// command where its span is not all its own: on a real GPU that
	// time-slices between VMs' contexts, spans of several VMs overlap and
	// each gets its share of the overlap. Zero: the span is the command's,
	// unless GPUMeasured.
	GPUNs int64
	// GPUMeasured: GPUNs is the backend's measure even where it is zero
	// (a command too short for the backend's sampling to see it run).
	GPUMeasured bool
}

// Busy is the GPU time the command used: GPUNs if the backend measured it,
// else its span. It is what usage is billed from.
func (c Completion) Busy() int64 {
	if c.GPUNs > 0 || c.GPUMeasured {
		return c.GPUNs
	}
	return c.End - c.Start
}

// Clock is a backend's time base in nanoseconds: real monotonic time or a
// simulated timeline.
type Clock interface {
	Now() int64
}

// TimeSlicer is implemented by a backend that says whether its GPU
// time-slices between VMs' contexts (compute preemption): a long command of
// one VM then does not keep another VM's commands off the GPU for its whole
// length. The turns arbitration relies on it for commands far longer than a
// turn (gate.OverrunQuanta).
type TimeSlicer interface {
	TimeSlices() bool
}

// TimeSlices reports whether b's GPU time-slices between VMs (false for a
// backend that does not say).
func TimeSlices(b Backend) bool {
	t, ok := b.(TimeSlicer)
	return ok && t.TimeSlices()
}

// StatusReader is implemented by a backend whose running-channel state can be
// polled without disturbing it (LoGA): the sim's status register and channel
// table, or the CUDA backend's markers.
type StatusReader interface {
	// ReadStatus fills st with the state at the current time.
	ReadStatus(st *Status)
}

// Status is a snapshot of what the GPU is executing.
type Status struct {
	Time int64 // on the backend's Clock
	// Running lists the channels executing a command now, one entry per
	// engine busy.
	Running []Running
	// Active lists the channels with queued or running work (the channel
	// table's active bits).
	Active []ChannelRef
}

// Running is one busy engine in a Status.
type Running struct {
	ChannelRef
	Engine int   // the backend's engine index (sim: 0 compute, 1 copy)
	Since  int64 // when the running command started, on the backend's Clock
}

// ChannelRef names one channel of one attached VM.
type ChannelRef struct {
	VM      uint32
	Channel int
}
