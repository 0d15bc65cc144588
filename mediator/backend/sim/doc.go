// Package sim is a simulated GPU backend, registered as "sim": a model of the
// GPU the LoGA paper describes, for tests, benchmarks and what-if studies.
//
// # The model
//
// The GPU has a compute engine and a copy engine. COPY runs on the copy
// engine, every other command on the compute engine. A dispatcher feeds each
// engine from the active channels round robin, one command at a time: each
// engine keeps a FIFO of the channels whose next command is for it, and a
// channel joins the back of that FIFO whenever its next command becomes
// runnable, so two busy channels alternate command by command. Commands are
// not preemptible, and a channel's commands run strictly in order: a channel
// never has two commands executing at once, even on different engines.
// Commands of different channels overlap when they use different engines.
//
// ReadStatus is the status register (the channel on each busy engine) and the
// channel table's active bits (channels with queued or running commands).
//
// # Commands
//
// The cost of a command (Params) is fixed when it starts: THROTTLE takes
// exactly its duration, NOP, FENCE, ALLOC and FREE a small fixed cost, MEMSET
// and COPY a fixed cost plus their length over a bandwidth. A command is
// checked when it starts (handles, ranges, quota), and ALLOC and FREE take
// effect then; the data a MEMSET or COPY moves is moved after its start by
// the VM's mover (see Memory), and its completion is delivered only once
// that is done, so a guest that looks after the completion sees the data. A
// command whose effect fails (a bad or reused handle, a range outside a
// buffer, no device memory, an invalid LAUNCH) never runs: it completes with
// its error code, Start = End = 0, and occupies no engine time. The channel
// goes on with its next command; stopping a failed channel is the mediator's
// business.
//
// # The longest command
//
// A VM's longest command (VMSpec.MaxCommandNs, SetMaxCommand) bounds every
// command's run, as cuda's watchdog does: a command whose cost is beyond
// its deadline (the limit and a quarter, backend.Deadline) runs to the
// deadline and fails with abi.ErrTimedOut, its data not moved, and a
// program still running at its deadline (measured in wall time from its
// start, on either clock) is ended there with it. The VM's buffers and
// modules are then dropped, as a GPU's context is (later commands naming
// them fail with ErrBadHandle); unlike on a GPU, the VM's other commands
// go on. The loss is the timed-out command's effect: its completion waits
// until the VM's mover has recorded it (below), and with the virtual
// clock the timeline waits with it. Timeouts counts these. A command whose
// modelled cost is within the deadline is not ended at it while it runs
// on for its data on the wall clock (Memory, below): the host's movement
// cannot be cut short, its length bounds it, and the VM is billed it.
//
// # Programs
//
// The sim runs no GPU code, but it has the GPU programs of abi/kernels.go
// built in: the ones that make system calls through the VM's syscall area
// (VMSpec.Syscalls). LOAD_MODULE with abi.ModuleSim and the image
// abi.SimModuleImage (a trailing NUL allowed) loads them as a module; another
// image is ErrBadRecord, PTX and cubin ErrUnsupported. LAUNCH names a program
// by its kernel name (another name: ErrUnsupported; a module not loaded:
// ErrBadHandle). The argument blob is copied out of the heap when the
// command starts and relocated: the sim has no device addresses, so
// RelocHeap only checks its heap offset (ErrHeapRange) and leaves it, and
// RelocSyscall (whose u64 must be 0) names the syscall area (a VM without
// one: ErrUnsupported); RelocBuffer is ErrUnsupported. The blob must hold
// the program's arguments (more bytes are ignored), with RelocSyscall on sys
// and RelocHeap on out and the heap fields (SweepHeap, WCHeap, which must be
// 0); slots inside the area, a known granularity, ordering (with or without
// abi.ProgOwnSlots, which changes nothing in the sim: its callers claim by
// compare-and-swap) and flags,
// iterations at most 65536, a grid of at most 2^20 work-groups of at most
// 1024 work-items, no more than Params.Resident: otherwise ErrBadRecord, or
// ErrHeapRange for an out, buffer or paths range outside the heap. The sim
// is stricter here than a GPU, which cannot refuse a kernel's arguments.
//
// A program runs like a GPU's: work-groups become resident in grid order,
// as many as Params.Resident work-items allow at once (a grid larger than
// that runs in waves), each in a goroutine, and its callers (every
// work-item, one per work-group, or one for the kernel, by granularity)
// make their calls through package slotcall, as GPU threads would: claim a
// slot, publish, poll for the result. With strong ordering at work-group
// granularity the group's other work-items wait at the barriers around the
// call and stay resident; relaxed, they leave at once and make room for
// other groups. Run-time failures of calls go into the program's out; a slot
// lost under a caller (a scribbling guest, a broken host) is a kernel fault:
// the program ends and the command completes with ErrDevice.
//
// A LAUNCH occupies the compute engine from its start until its program
// ends, an open-ended command: ReadStatus shows its channel running all the
// while. With the wall clock it ends at the wall time the program finished.
// With the virtual clock the program holds the timeline: while it runs,
// time does not pass its start (events at later times wait, Run and
// RunUntilIdle of drive=manual block until it ends), and it costs its
// measured wall duration: its End is its Start plus that, and the commands
// of the other engine that were due meanwhile come after on the timeline as
// if they had overlapped with it. Closing the VM (or the backend) aborts its
// programs: their slot waits end, the command completes with ErrShutdown,
// and Close returns once the program goroutines are gone (they touch the
// heap and the syscall area, which the caller may unmap next). A program
// whose calls are never served runs until then.
//
// # Memory
//
// Device buffers belong to the VM that allocated them, by the VM's own
// handles; the backend's capacity (Params.Memory) bounds their total size,
// and a VM's quota (VMSpec.MemoryQuota, SetMemoryQuota) the size of its
// own: an ALLOC past either fails with ErrNoMemory. A quota lowered below
// the VM's use takes nothing back; its ALLOCs fail until it has freed
// enough. A VM holds at most 65536 buffers (maxBuffers): an ALLOC past
// them fails with ErrNoMemory too.
//
// A buffer is backed lazily, in 64 KiB pages: an ALLOC takes no host
// memory, a page nobody wrote reads as zeros, a MEMSET of whole pages
// points them at a shared read-only page of the value, and a
// device-to-device COPY of whole aligned pages shares them (copy on
// write). Host memory goes only to pages written with other data (a
// host-to-device COPY, the ends of a MEMSET, an unaligned COPY): slots of
// the VM's arena (below), as many as such pages (and, while a command
// runs, the pages it writes anew); a command that frees 16 slots or more
// (a FREE of a megabyte written) gives their memory back to the host,
// fewer stay backed for the next pages written.
//
// Data moves outside Sim.mu: each VM has a mover goroutine, started when
// one of its MEMSETs or COPYs starts while none is running, that carries
// out the VM's movements in the order their commands started and ends when
// none is left. It also records every command that changes the VM's
// device state (below: an ALLOC's, FREE's or LOAD_MODULE's record after
// the movements that started before it), whose completion waits for it as
// a movement's does. One VM's large MEMSETs and COPYs so never hold the
// backend's lock, and the other engine runs on while they move (a FREE of
// the same VM on another channel completes after them, as a GPU's free
// waits for the device). A movement
// holds its buffers, not their handles: a FREE that comes in between (from
// another channel; the guest's own race) gives the quota back at once, and
// the movement ends on the unreachable buffer. A command takes its Params
// cost on the timeline where the host keeps up. With the wall clock, a
// command whose data (or record) the host has not moved by its modelled
// End runs on, its engine busy, until the mover is done, and ends then:
// the sim's GPU is as fast as the host moves data, and its bills, its
// engines' status and its timeline agree on it. No command is in flight
// on an idle engine, so arbitration turns, which give the GPU to one VM at
// a time, charge a VM what its commands held the GPU (a VM of 64 MiB
// MEMSETs, 68 µs each in the model and about 200 µs on a loaded two-core
// host, was charged about a third of the time its turns lasted while its
// engine was freed at the modelled End, and the VM beside it waited 60-140
// ms at p99 for those turns, 16-23 ms since). With
// the virtual clock the timeline waits at the command's End until its data
// has moved, as it waits for a program, so the simulation stays
// deterministic and the cost the model's. Closing a VM drops the movements
// not begun and waits for the one under way.
//
// # Keeping a VM's state for a successor
//
// A VM's device state lives, from its Attach on, in two memfds, its
// device files (devfile.go has the format): the arena, whose 64 KiB slots
// back the buffers' data pages (its address space is reserved for twice
// the memory's pages and one slot for each buffer's last page, however
// small the buffer, which the buffer cap bounds: slots never run out
// short of a reserve of 1 TiB), and the meta file: the request ring's
// claim counter (the very word the VM's programs claim on) and a log of
// records (ALLOC, FREE, LOAD_MODULE, a page's slot, fill value or zeros,
// the loss of every buffer and module after a timeout). The mover records
// each command after its effect, in the order the commands started, and
// commits it with one atomic store of the log's commit word, before its
// completion is delivered; a page the committed records name is never
// written (a MEMSET or COPY writes the pages it changes into free slots,
// and a slot is reused only once the records no longer name it). A kill
// -9 of the process at any instant so leaves the state of a prefix of
// the commands that started, each whole, and every command whose
// completion was delivered among them. A full log is compacted into the
// meta file's other segment, and the commit word switches to it.
//
// Stored (backend.Persister) names the two files, for an fd store; Keep
// (backend.Keeper) closes the VM as Close does (the movement under way
// finishes and is recorded; the rest are dropped, to run again in the
// successor) and hands them over. Attach with VMSpec.Adopt takes them
// over: it replays the committed records, each copied out of the file
// and checked as it is replayed (handles non-zero and unique, FREEs of
// live buffers, pages inside their buffers, slots inside the arena, fills
// of whole pages, at most maxModules modules and maxBuffers buffers, the
// buffers within the memory at every record; the buffers in the end
// within the sim's free memory), or refuses them with
// backend.ErrBadKept, and the VM goes on in the same files. A VM whose
// files cannot be made or grown keeps its state in the heap, with a
// warning, and gives its files up (a successor after a crash refuses
// them); Keep then writes its state, quiescent, into fresh files, so a
// hand-over loses nothing.
//
// # Clocks and driving
//
// Both clocks run one discrete-event core: a timeline, Now, and a queue of
// events ordered by (time, sequence number), so that equal times resolve in
// the order the events were created.
//
// With the virtual clock, time jumps from event to event and never moves on
// its own while the GPU is idle. By default a backend goroutine runs the
// events as fast as it can ("drive" = "loop"). With "drive" = "manual" no
// goroutine is started: the caller runs the timeline with Run, RunUntilIdle
// or Step, and completions and After functions run inside those calls, in
// the caller's goroutine, so a workload can Submit its next command
// synchronously. Driven from one goroutine, the simulation is deterministic:
// the same calls in the same order give the same timestamps.
//
// With the wall clock, the timeline is monotonic time since Open, and an
// event takes effect at its timestamp: whoever touches the backend first
// (Submit, ReadStatus, or the backend goroutine woken by a timer) processes
// every event that is due, so the state a status read sees, and the start
// time of a queued command, are exact even when the goroutine wakes late.
// Completions are delivered by the backend goroutine once wall time has
// reached their End. A command submitted at wall time t starts at t, or when
// its engine and its channel's previous command free up, whichever is later.
//
// # Locking
//
// One mutex (Sim.mu) guards the whole model; a program's goroutines never
// hold it while they wait for slots, and take it once, to end the command.
// The movers never hold it while they move data or write the device files
// (buffers' pages and the files are theirs alone), only to take the next
// movement and to mark one done.
// Completions and After functions
// are called without it held, one at a time, by the goroutine that drives the
// timeline; they may call Submit and After but must not call VM.Close or
// Close in the "loop" drive, which wait for that same goroutine.
package sim
