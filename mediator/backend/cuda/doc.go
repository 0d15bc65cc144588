// Package cuda is the backend that drives a real NVIDIA GPU through the CUDA
// driver API, registered as "cuda".
//
// # Loading
//
// libcuda.so.1 is opened at run time with purego: the mediator is a static
// Go binary without cgo, and a host without a GPU can still run it with
// another backend. Opening "cuda" on such a host fails with the loader's
// reason. Everything the backend asks of the driver goes through a small
// interface (driver), which the tests satisfy with a fake driver, so the
// translation from ABI commands to driver calls is tested without a GPU.
//
// # Worker processes
//
// A kernel that faults (an illegal address, say) poisons every CUDA
// context of its process, not only its own: the driver's documentation
// says the process must be relaunched, and the H100 does just that. So
// each VM's context lives in a GPU worker process of its own: this binary,
// started again as "BINARY cuda-worker" (WorkerCommand: a hidden
// subcommand, cudacmd's, of every binary that links the backend, which
// runs WorkerMain; never an environment switch). The mediator never makes
// a context. A worker gets the VM's shared block (a memfd, shared.go), the heap's
// file, a doorbell eventfd and a socket for its start, its end and its
// faults; it registers the heap and the shared block with the GPU, makes
// one non-blocking stream per channel and loads the throttle kernel. A VM
// with a syscall area (ABI 1.1, VMSpec.SyscallFile) has it mapped and
// registered the same way (page locked, mapped into the context, portable):
// the VM's kernels write its slots with system-scope stores and claim them
// with atomics, and the mediator's syscall forwarder serves them from its
// own mapping of the same pages.
//
// Submit writes the command into the shared block's ring and rings the
// doorbell only if the worker sleeps (it looks at its empty ring for
// worker_spin, 100 µs, before it does: a wakeup of the worker process costs
// tens of microseconds); the worker puts it on its channel's stream:
//
//	write start marker = seq     (cuStreamWriteValue64 into the shared block)
//	the command's work           (kernel, copy, memset, stream-ordered alloc/free)
//	write end marker = seq
//
// and leaves its code in the command's slot before anything that writes
// the end marker (a THROTTLE that launched: right after the launch call
// returns; the completer holds its end until the code is there). A ring
// entry is a pair of cache lines whose stamp, written last, says it is
// there: the worker looks at the next entry's stamp, not at the tail, so
// a command reaches it in the entry's lines alone. NOP and FENCE are the
// markers alone. THROTTLE launches a
// one-thread spin kernel (kernels.go) that writes its own markers around
// its spin and records the time it ran on %globaltimer, excluding the
// stretches its context was switched out: the ground truth the benchmarks
// compare accounting with (GroundTruth; kept only for the VMs attached
// after KeepGroundTruth, which the benchmarks call and sluiced does not).
// LOAD_MODULE loads a copy of the image out of the heap (cuModuleLoadData is synchronous: it holds up only
// its own VM's worker); LAUNCH copies the kernel's name and argument blob
// out of the heap, relocates buffer handles to device addresses and heap
// offsets to the registered heap's device address, a syscall relocation
// (abi.RelocSyscall, whose u64 must be 0) to the registered syscall area's
// (abi.ErrUnsupported for a VM without one), and launches with the packed
// blob. LOAD_MODULE of abi.ModuleSim (the sim backend's built-in programs)
// is abi.ErrUnsupported: a GPU runs their PTX (guest-agent/kernels). Commands the worker can judge (an unknown handle, a range
// outside a buffer or the heap, an image the driver refuses) get their
// code and only their markers, so they complete in their place in the
// channel's order.
//
// # Faults and restarts
//
// A worker whose context faulted (a driver call fails with a sticky error,
// or a stream quiet for stall_check answers one) reports it and exits; a
// worker that crashes just ends. Either way the VM's commands that had not
// finished complete with abi.ErrDevice, its later ones fail at once, and a
// fresh worker starts after restart_delay (doubling, up to a minute, while
// workers keep ending young). The fresh context has none of the old one's
// buffers or modules: commands that name them get abi.ErrBadHandle. Other
// VMs' workers do not notice.
//
// # Hand-over
//
// A VM's worker outlives a hand-over to a successor sluiced (Keep, which
// implements backend.Keeper, and Attach with VMSpec.Adopt; keep.go): the
// successor is the same process after exec, so the worker stays its child,
// and its context, buffers, modules, handle tables and request ring claim
// counter (all the worker's) stay as they were. Keep shuts the VM (Submit
// refuses), waits up to 5 s for the commands in flight to complete (the
// hand-over has waited for them already: what is still in flight runs
// again in the successor, and an ALLOC, FREE or LOAD_MODULE among them
// then fails with abi.ErrBadHandle, its effect being kept), asks the idle
// worker its state over its socket and hands over that socket, the shared
// block's memfd, the doorbell eventfd and a pidfd of the worker, with the
// ring's tail, the channels' positions and what the worker holds. The
// successor checks each descriptor for what it must be (a UNIX seqpacket
// socket, a sealed memfd of the block's size, an eventfd, a pidfd of a
// child of its own), the heap and syscall area files by inode against the
// VM's, the ring and the end markers in the block, and asks the worker
// itself: its answer's sender, as the kernel's credentials tell it, must be
// the pidfd's process, its answer must echo the query's nonce (an answer
// to another query, one a predecessor gave up on, is passed over), and its
// protocol (workerProtocol), device, layout, position and holdings those
// kept. A kept state that does not check out
// is backend.ErrBadKept, and the worker is ended (and reaped, where the
// pidfd was good): the VM attaches afresh and its old handles are
// abi.ErrBadHandle, as after a worker crash; a worker that dies after the
// adoption is restarted as any other. Where Keep fails (no worker
// running, commands still running after 5 s, a worker that does not
// answer) it closes the VM as Close does. A kept worker keeps the options
// it was started with (gap, stall_check, worker_spin) until it restarts,
// and runs the predecessor's binary: a successor adopts only workers of
// its own workerProtocol.
//
// # Crashes of the mediator
//
// With an fd store (VMSpec.Store: sluiced's under systemd) the same four
// descriptors of each worker are stored, under the VM's name, before
// Attach (or a restart) returns, and removed when the worker ends. The
// store's copy of the socket keeps a worker from seeing it close when the
// mediator is killed (no parent-death signal ends it either), so it goes
// on, an orphan now, with its context; a store emptied (systemctl stop)
// closes the socket and the worker ends. A successor started after the
// crash finds the descriptors without data (a Kept whose descriptors say
// it all) and adopts the worker with the hand-over's checks, but first
// proves it (adoptProcess: the answer on the kept socket comes from the
// pidfd's process, by the kernel's credentials, with the pidfd still
// naming that pid before and after) and settles it, as nobody quiesced the
// VM (settle, keep.go): a ring entry counts from its publication (its
// stamp, stored once the entry is whole and before the tail: an entry the
// dead mediator stamped but stored no tail for counts, and the ring goes
// on past it), so an entry it had not finished writing never runs; every
// published one runs once in the worker, whose completions nobody
// reports: the successor's
// channels resume from what the dead mediator had published, so a command
// whose completion was not published runs again when its record is
// forwarded anew (an ALLOC, FREE or LOAD_MODULE among them fails with
// abi.ErrBadHandle, as after a hand-over); the adoption waits for the
// worker to be idle at the tail and numbers the VM's commands on from its
// end markers, so no marker or code of before completes a new command;
// the request ring claim counter is the worker's and goes on. The whole
// adoption (proving, settling, every query) has one budget, adoptWait
// (5 s): a worker still busy then, or that stops answering (a kernel that
// runs on, or one waiting for a system call nobody serves before the VM
// is attached), is refused (backend.ErrBadKept), ended and replaced, with
// a warning; the replacement's claim counter starts at VMSpec.RingHead,
// which the caller reads when the replacement starts, past any call the
// refused worker's kernels made while it was weighed. A refusal only
// ever signals a proved worker; an unproved one is told to stop on its
// socket and ends by itself once the kept descriptors close. An orphan's
// exit status is its new parent's: its end is seen through its pidfd. A
// child let go of (dead already, or told to stop) is reaped once every
// thread of it has exited (reapWhenEnded: a goroutine waits for its pidfd
// to read ready; a SIGKILLed worker's first thread is a zombie before the
// process can be waited for), and how it ended is logged.
//
// # Completions, the running-channel state and billing
//
// A completer goroutine in the mediator watches the markers of the
// channels with work outstanding, credits GPU time and queues completions;
// a deliverer goroutine runs the VMs' callbacks in the same order, so a
// sweep never waits for a callback (which forwards the VM's next commands)
// and sees starts as promptly as ends. Where what a sweep found due is all
// that is outstanding (a depth-1 loop), no start can go unseen while the
// callbacks run but those of the commands they submit, which come a GPU
// launch latency later: the completer runs those callbacks itself and
// skips the hand-off (Backend.inline; off for a while after a callback
// over 10 µs). While anything is outstanding the
// completer spins (one host core; it sleeps when the GPU has nothing of
// ours), so Start and End are host observation times within a sweep (about
// a microsecond) of the marker writes; the deliverer spins 200 µs after a
// delivery, then parks. The completer hands completions over through a
// lock-free queue (handoff.go), and a THROTTLE's ground-truth record is
// read where its callback runs (the deliverer, or the completer delivering
// inline), not in the sweep: the interval after a sweep that delivered is
// what a short kernel's start is seen within, and is kept short. ReadStatus is the
// LoGA status read: a channel runs when its start marker is ahead of its
// end marker, since the moment that was first seen.
//
// Several VMs can show as running at once: the GPU time-slices between
// contexts, and no CUDA interface says which context holds the GPU at an
// instant. Each VM is therefore its own Engine in the status, and the
// estimator splits stretches where several run evenly between them (what
// time slicing does on average). Completion spans then overlap, so they are
// not what a VM is billed. A sweep reads each channel's end and start
// markers once, together, right after it takes its time (so starts and ends
// are seen equally late), and splits the time since the last sweep between
// the commands that ran in it by what ran at its two ends, each end half of
// it (the trapezoid rule: a sweep that came late bills what ran at its
// ends, not the launch gaps in it): each half evenly between the VMs
// running at that end, a VM's part evenly between its channels running
// then (the union of its streams, counted once), a channel's between the
// commands it ran in the interval, those that started and ended unseen
// included. A command's sum is its Completion.GPUNs (GPUMeasured: zero for
// a command no sweep saw run). The bills of all VMs add up to the time the
// GPU was busy with any of them at the sweeps, less the switch overhead:
// of a half at whose end several VMs ran, a fraction f (the option
// switch_overhead; by default measured once at Open by two probe VMs that
// spin at once, switchcost.go, then as the tracers measure it, between f
// and 2f) is billed to nobody and counted apart
// (Backend.SwitchOverhead). f is the switch cost between the probe's small
// contexts, not that of every kernel's state: it takes out the switches'
// fixed part.
//
// That even split is the fallback. While several VMs' contexts run at once
// (the first sweep at which two VMs ran, or one's work waited beside
// another's running work, turns it on, 100 ms without one turns it off),
// each VM's worker runs a tracer in its context, one thread on a stream of
// its own that counts, on %globaltimer, the time its context holds the GPU
// while one of the VM's commands runs (tracing.go). A VM is then billed its
// count, at most the interval at a time, the rest at its next intervals: a
// VM waiting its turn, its kernel preempted, is billed nothing, and what
// nobody is billed of the time something ran is the switches', measured.
// On an H100, 100 µs kernels beside 1 ms ones: both bills within 1% (evenly
// split, the long VM was billed 2-3% over); 37 µs kernels beside longer
// ones within 1.5%, 20 µs ones −1.5 … +3.6%.
//
// # The hop diagnostic
//
// With SLUICE_CUDA_HOPS=FILE (HopsEnv) every command is timed at each hop:
// Submit, the worker's ring read and its launch call's return (written in
// a trace area of the shared block, on CLOCK_MONOTONIC, which the
// processes share), the THROTTLE kernel's first and last %globaltimer
// reads (moved onto the host's clock by a ping-pong kernel the worker runs
// at its start: clocksync.go), the completer's sight of the end, the
// callback, and the channel's next Submit; for billing, a THROTTLE's bill
// less its kernel's own time (bill_less_kernel, with its mean), the span
// the sweeps saw it run less that time, the GPU's launch gap between two
// queued kernels, the interval after a sweep that delivered (the
// delivering sweep and its hand-off to the deliverer apart), and the
// completer's parks. Close writes each hop's quantiles as JSON to FILE; the native baseline writes its loop's to
// FILE.native.json (and with SLUICE_NATIVE_STREAM_MARKERS=1 puts the
// markers on the stream as two cuStreamWriteValue64 around each kernel,
// as a worker does for LAUNCH). Unset, the hot path pays a nil check a
// hop and the block has no trace area.
//
// # Limits
//
// A VM's own kernels run in the context where its markers and THROTTLE
// records are mapped (the shared block's GPU area; the ring and the codes
// are not registered with the GPU). A kernel that found them could write
// its own VM's markers: end its commands early in the mediator's eyes, hide
// its GPU time from the poller and leave overlaps to be billed to others.
// The worker maps the block at a random address, far from the heap whose
// address the VM learns from its relocations, so a kernel that goes looking
// faults first, and every fault costs the VM its worker and a restart delay
// that doubles. The mediator takes nothing from the block but marker values,
// codes and the VM's tracer's count, and refuses codes the worker cannot
// have written; a forged count raises or lowers the forger's own bill
// (tracing.go), and neither the watchdog's clock nor the tracers a worker
// launches go by it.
//
// # The watchdog
//
// A command may run on the GPU for the VM's longest command
// (VMSpec.MaxCommandNs, SetMaxCommand; sluiced --max-command) and a
// quarter more (backend.Deadline). The completer keeps each running
// command's clock: from when its start marker is seen (the stream reached
// it: the channel's earlier commands have ended, so time queued behind them
// does not count), it gains its VM's share of the GPU at every sweep (the
// sweep's time over the VMs running, as billing splits it; a VM's channels
// each gain the whole share, they run at once in its context). A command
// past its deadline gets its VM's worker killed, which ends its context and
// the kernel: the VM's commands in flight, and those submitted until a
// fresh worker runs, fail with abi.ErrTimedOut, and the fresh worker (after
// restart_delay, as after a fault) has none of the old one's buffers and
// modules (abi.ErrBadHandle). Other VMs do not notice. Timeouts counts the
// kills; each is logged. Details: watchdog.go.
//
// # Memory quota
//
// A VM's device memory quota (VMSpec.MemoryQuota, SetMemoryQuota) lives in
// the shared block's first page, which the GPU cannot reach; the worker
// reads it at every ALLOC and LOAD_MODULE and refuses one that would take
// the VM's buffers and modules past it with abi.ErrNoMemory before it
// reaches the driver (the GPU's own out-of-memory is the same code). A
// module takes device memory when it loads (its global variables,
// constants and code): LOAD_MODULE compiles PTX to a cubin with the
// driver's linker (cuLinkAddData) and charges what the cubin's allocated
// sections and loaded segments ask for (package cubin), before the driver
// loads it; a fatbin is abi.ErrUnsupported (the driver would pick one of
// its images by itself), and a VM loads at most maxModules modules. A
// kernel's local memory takes device memory at its launch: the driver
// holds the most any kernel launched in the context used a thread (the
// stack size at least) for every thread the device can run at once, and
// keeps it; a LAUNCH that grows it is charged the growth (localGrowth) and
// refused past the quota before it launches. FREE gives a buffer's bytes
// back; a module's and the local memory's stay until the context ends. The
// worker publishes what its buffers, modules and local memory hold beside
// the quota (MemoryUsed); a fresh worker after a fault holds none. A quota
// lowered below the use takes nothing back: ALLOCs, module loads and
// launches that grow the local memory fail until the VM has freed enough.
// No one charge may be larger than the device (a guest's cubin says what
// it likes; a larger one could wrap the count): such a command is
// abi.ErrNoMemory with or without a quota. What the driver takes for the
// context itself and its streams is not counted.
//
// One VM at a time on the GPU (a VM alone, or the mediator's turns) splits
// nothing, and its bill is its kernels' time but for the sweeps'
// quantisation and the launch gaps no sweep saw (docs/data-path.md, "How
// CUDA credits a command's GPU time").
package cuda
