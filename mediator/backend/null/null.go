// Package null is the null backend, registered as "null": a GPU that does
// nothing. NOP and FENCE complete at once (Start = End = the time they were
// submitted, on the wall clock); every other command fails with
// abi.ErrUnsupported and never runs (ALLOC too: a VM holds no device
// memory, and any memory quota holds). It is the backend for testing the
// mediator's plumbing without a model of a GPU.
package null

import (
	"fmt"
	"sync"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

func init() {
	backend.Register("null", func(o backend.Options) (backend.Backend, error) { return New(o) })
}

// Backend is the null GPU.
type Backend struct {
	epoch time.Time

	mu     sync.Mutex
	vms    map[uint32]*vm
	closed bool
}

var _ backend.Backend = (*Backend)(nil)

// New opens a null backend. It knows no Params; its clock is "wall" ("" means
// wall too).
func New(o backend.Options) (*Backend, error) {
	if o.Clock != "" && o.Clock != "wall" {
		return nil, fmt.Errorf("null clock %q: %w: only \"wall\"", o.Clock, backend.ErrInvalid)
	}
	for k := range o.Params {
		return nil, fmt.Errorf("null param %q: %w: unknown key", k, backend.ErrInvalid)
	}
	return &Backend{epoch: time.Now(), vms: map[uint32]*vm{}}, nil
}

// Clock is monotonic ns since New.
func (b *Backend) Clock() backend.Clock { return clock{b.epoch} }

type clock struct{ epoch time.Time }

func (c clock) Now() int64 { return int64(time.Since(c.epoch)) }

// Attach creates a VM. Its commands complete inside Submit, on the
// submitter's goroutine (which the backend contract allows: Complete may
// call Submit): no goroutine hand-off between a doorbell and its
// completion.
func (b *Backend) Attach(spec backend.VMSpec) (backend.VM, error) {
	if spec.Channels < 1 || spec.Channels > abi.MaxChannels || spec.Complete == nil {
		return nil, fmt.Errorf("attaching VM %d: %w: %d channels, callback set %t", spec.ID, backend.ErrInvalid, spec.Channels, spec.Complete != nil)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("attaching VM %d: %w", spec.ID, backend.ErrClosed)
	}
	if _, dup := b.vms[spec.ID]; dup {
		return nil, fmt.Errorf("attaching VM %d: %w: ID in use", spec.ID, backend.ErrInvalid)
	}
	v := &vm{b: b, id: spec.ID, channels: spec.Channels, complete: spec.Complete}
	b.vms[spec.ID] = v
	return v, nil
}

// Close detaches every VM.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	vms := make([]*vm, 0, len(b.vms))
	for _, v := range b.vms {
		vms = append(vms, v)
	}
	b.mu.Unlock()
	for _, v := range vms {
		_ = v.Close() // ErrClosed only, if it raced with VM.Close
	}
	return nil
}

type vm struct {
	b        *Backend
	id       uint32
	channels int
	complete func(backend.Completion)

	mu       sync.Mutex
	closing  bool
	inflight sync.WaitGroup // Submits completing: Close waits for them
}

// Submit completes cmd at once, on the caller's goroutine.
func (v *vm) Submit(channel int, cmd abi.Command, tag uint64) error {
	if channel < 0 || channel >= v.channels {
		return fmt.Errorf("submitting to channel %d of VM %d: %w", channel, v.id, backend.ErrInvalid)
	}
	c := backend.Completion{Channel: channel, Tag: tag, Op: cmd.Op, Code: abi.ErrUnsupported}
	if cmd.Op == abi.OpNop || cmd.Op == abi.OpFence {
		now := v.b.Clock().Now()
		c.Code, c.Start, c.End = abi.OK, now, now
	}
	v.mu.Lock()
	if v.closing {
		v.mu.Unlock()
		return fmt.Errorf("submitting to VM %d: %w", v.id, backend.ErrClosed)
	}
	v.inflight.Add(1)
	v.mu.Unlock()
	defer v.inflight.Done()
	v.complete(c)
	return nil
}

var _ backend.MemoryQuota = (*vm)(nil)

// SetMemoryQuota does nothing: the null GPU has no memory, and every ALLOC
// fails with abi.ErrUnsupported, so any quota holds.
func (v *vm) SetMemoryQuota(uint64) {}

// MemoryUsed is 0: nothing is ever allocated.
func (v *vm) MemoryUsed() uint64 { return 0 }

var _ backend.CommandLimit = (*vm)(nil)

// SetMaxCommand does nothing: the null GPU's commands take no time, so any
// limit holds.
func (v *vm) SetMaxCommand(int64) {}

// Timeouts is 0: no command runs long enough.
func (v *vm) Timeouts() int64 { return 0 }

// Close refuses further commands and waits for the completions being
// delivered (nothing is ever queued here).
func (v *vm) Close() error {
	v.mu.Lock()
	if v.closing {
		v.mu.Unlock()
		return fmt.Errorf("closing VM %d: %w", v.id, backend.ErrClosed)
	}
	v.closing = true
	v.mu.Unlock()
	v.inflight.Wait()
	v.b.mu.Lock()
	delete(v.b.vms, v.id)
	v.b.mu.Unlock()
	return nil
}
