package cuda

import (
	"errors"
	"log/slog"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// The watchdog bounds how long one command of a VM may run on the GPU (the
// VM's longest command, VMSpec.MaxCommandNs). A kernel cannot be stopped
// from outside its context, and a context ends with its process: a command
// past its limit costs the VM its GPU worker. The completer keeps the
// watchdog's clock, since it already sweeps the markers:
//
//   - A command's clock starts when its start marker is seen: the stream
//     reached it, so the commands before it on its channel have ended (the
//     end marker of one and the start marker of the next are adjacent on
//     the stream). Time spent queued behind the channel's earlier commands,
//     or waiting for the worker to issue it, does not count.
//   - While it runs, it is credited its VM's share of the GPU at every
//     sweep: the time since the last sweep over the number of VMs with a
//     command running (the even split, credit; not the tracers' counts,
//     which are in the VM's reach, tracing.go). The GPU
//     time-slices between contexts, so a kernel that shares the GPU with
//     two other VMs' kernels takes three times as long in wall time; its
//     limit is on its own part. A VM's channels run at once in its context
//     and each running command gets the whole VM share.
//   - It is past its limit when that time exceeds backend.Deadline, the
//     limit and a quarter: a command at the limit (a THROTTLE of
//     MaxThrottleNs, which the mediator accepts) is not ended for the
//     switching overheads and the unevenness of time slicing the even
//     split leaves in its share (up to 11% measured on an H100).
//
// The watchdog kills the worker process (which ends the context and so
// the kernel) and counts the kill (Timeouts); the worker's end is then
// handled as a fault's: the VM's commands in flight fail, with
// abi.ErrTimedOut instead of abi.ErrDevice, those submitted before a fresh
// worker runs too, and the fresh worker (after restart_delay) has none of
// the old one's buffers and modules. Other VMs' workers and commands do not
// notice.

// errWatchdog is why a worker the watchdog killed ended.
var errWatchdog = errors.New("ended by the watchdog")

// lateRef is a command found past its VM's limit at a sweep.
type lateRef struct {
	ch  *channel
	w   *workerConn
	op  abi.Opcode
	ran time.Duration
}

// overdue reports whether ch's command seq, which runs, has run past its
// VM's limit.
func (ch *channel) overdue(seq uint64) (lateRef, bool) {
	lim := ch.vm.maxCommand.Load()
	if lim <= 0 {
		return lateRef{}, false
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	it := ch.find(seq)
	if it == nil || it.ran <= float64(backend.Deadline(lim)) {
		return lateRef{}, false
	}
	return lateRef{ch: ch, w: it.w, op: it.op, ran: time.Duration(it.ran)}, true
}

// timeOut kills l's worker, once, unless it has ended already.
func (v *cudaVM) timeOut(l lateRef) {
	w := l.w
	if w.dead.Load() || !w.timedOut.CompareAndSwap(false, true) {
		return
	}
	v.timeouts.Add(1)
	slog.Warn("cuda: a VM's command ran past its limit; killing the VM's GPU worker",
		"vm", v.id, "name", v.name, "channel", l.ch.idx, "op", l.op, "ran", l.ran,
		"limit", time.Duration(v.maxCommand.Load()))
	w.p.kill()
}

var _ backend.CommandLimit = (*cudaVM)(nil)

// SetMaxCommand sets the longest a command of the VM may run, in ns (0: no
// limit). It applies at once, to the commands running too.
func (v *cudaVM) SetMaxCommand(ns int64) { v.maxCommand.Store(max(ns, 0)) }

// Timeouts is how many of the VM's workers the watchdog killed.
func (v *cudaVM) Timeouts() int64 { return v.timeouts.Load() }
