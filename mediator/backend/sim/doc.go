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
// and COPY a fixed cost plus their length over a bandwidth. A command's effect
// on memory (ALLOC, FREE, MEMSET, COPY) happens when it starts; a guest must
// not look before the completion anyway, and it means nothing touches a VM's
// heap once its running commands have started. A command whose effect fails
// (a bad or reused handle, a range outside a buffer, no device memory, or
// LOAD_MODULE and LAUNCH, which this version does not implement) never runs:
// it completes with its error code, Start = End = 0, and occupies no engine
// time. The channel goes on with its next command; stopping a failed channel
// is the mediator's business.
//
// Device buffers are Go byte slices owned by the VM that allocated them, by
// the VM's own handles; the backend's capacity (Params.Memory) bounds their
// total size.
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
// One mutex (Sim.mu) guards the whole model. Completions and After functions
// are called without it held, one at a time, by the goroutine that drives the
// timeline; they may call Submit and After but must not call VM.Close or
// Close in the "loop" drive, which wait for that same goroutine.
package sim
