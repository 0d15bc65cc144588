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
// # Contexts and streams
//
// Each VM gets a CUDA context of its own (its own GPU address space, so a
// VM's buffers and kernels cannot reach another's, and a faulting kernel
// poisons only its own context) and one non-blocking stream per channel. A
// command becomes, on its channel's stream:
//
//	write start marker = seq     (cuStreamWriteValue64 into host-mapped memory)
//	the command's work           (kernel, copy, memset, stream-ordered alloc/free)
//	write end marker = seq
//
// NOP and FENCE are the markers alone. THROTTLE launches a one-thread spin
// kernel (kernels.go) that writes its own markers around its spin and
// records the time it ran on %globaltimer, excluding the stretches its
// context was switched out: the ground truth the benchmarks compare
// accounting with (GroundTruth). LOAD_MODULE loads a
// copy of the image out of the heap when it is submitted (cuModuleLoadData
// is synchronous); LAUNCH copies the kernel's name and argument blob out of
// the heap, relocates buffer handles to device addresses and heap offsets to
// the registered heap's device address, and launches with the packed blob.
// The heap is registered for DMA (cuMemHostRegister) when the VM attaches,
// so COPY is an asynchronous copy between it and device memory.
//
// Commands the backend can judge when they are submitted (an unknown handle,
// a range outside a buffer or the heap, an image the driver refuses) get
// their error code without touching the GPU, and complete in their place in
// the channel's order.
//
// # Completions and the running-channel state
//
// A completer goroutine watches the end markers of the channels with work
// outstanding and delivers completions in order. While anything is
// outstanding it spins (one host core; it sleeps when the GPU has nothing of
// ours), so Start and End are host observation times within a sweep (about
// a microsecond) of the marker writes. ReadStatus is the LoGA status read: a
// channel runs when its start marker is ahead of its end marker, since the
// moment that was first seen. Several channels can show as running at once:
// the GPU time-slices between contexts, and no CUDA interface says which
// context holds the GPU at an instant. Each channel is therefore its own
// Engine in the status, and the estimator splits stretches where several
// run evenly between them (what time slicing does on average). For the same
// reason completion timestamps bound a command's span, not its GPU time,
// when VMs overlap: each VM's spans then include time the others ran.
//
// # Faults
//
// A kernel that faults (an illegal address, say) leaves its context's
// sticky error. The completer notices a channel that makes no progress and
// asks its stream (cuStreamQuery): on a sticky error every outstanding and
// later command of that VM completes with abi.ErrDevice. Other VMs' contexts
// are not affected.
//
// # Limits
//
// A VM's own kernels run in the context where its markers and ground-truth
// records are mapped: a hostile kernel could overwrite them and misreport
// its own timing (never another VM's). There is no per-VM device memory
// quota beyond what the GPU has.
package cuda
