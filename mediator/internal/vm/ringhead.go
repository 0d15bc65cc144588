package vm

import (
	"sync"

	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/internal/syscalls"
)

// ringHead is where a request ring claim counter the backend makes again
// (a GPU worker started afresh, backend.VMSpec.RingHead) starts: where the
// forwarder reads, and before the forwarder exists, where it will start:
// 0, or the predecessor's head. After a crash the ring may hold calls the
// crashed forwarder had not read, and kernels of a kept GPU worker may
// still be making calls while the backend weighs adopting it: the counter
// starts past every call there (syscalls.ReadyEnd), read when the backend
// asks (after a worker it refused has ended), not once before. The
// forwarder, which serves those calls first, reaches it once it has.
type ringHead struct {
	v       *VM
	area    *shm.Region // the syscall area
	slots   int
	orphans bool // after a crash: calls may wait past the head

	mu   sync.Mutex
	seed uint64 // the furthest start given before the forwarder existed
}

func newRingHead(v *VM, area *shm.Region) *ringHead {
	r := &ringHead{v: v, area: area, slots: int(v.cfg.Layout.SyscallSlots), seed: v.adoptedHead()}
	r.orphans = v.cfg.Adopt != nil && v.cfg.Adopt.Orphans
	r.read() // what the ring holds now, should the backend never ask before the forwarder runs
	return r
}

// read moves the seed past the calls the ring holds now.
func (r *ringHead) read() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.orphans {
		r.seed = max(r.seed, syscalls.ReadyEnd(r.area, r.slots, r.v.adoptedHead()))
	}
	return r.seed
}

// get is backend.VMSpec.RingHead.
func (r *ringHead) get() uint64 {
	if f := r.v.sysRef.Load(); f != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return max(f.RingHead(), r.seed)
	}
	return r.read()
}
