package cuda

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// Each channel's share of its VM's host-mapped marker block: the start and
// end markers on one cache line, then a ring of slots where THROTTLE kernels
// leave their ground-truth records (slot seq % truthSlots).
const (
	offStart     = 0
	offEnd       = 8
	offSlots     = 64
	slotSize     = 32
	truthSlots   = 1024
	markerStride = offSlots + truthSlots*slotSize
)

// cudaVM is one VM's context on the GPU.
type cudaVM struct {
	b        *Backend
	id       uint32
	name     string
	ctx      cuContext
	complete func(backend.Completion)
	chans    []*channel

	heap    []byte
	heapDev devptr // the registered heap's device address; 0 without a heap

	marks    unsafe.Pointer // host-mapped marker block (C memory)
	marksDev devptr
	throttle cuFunction

	mu     sync.Mutex // the handle tables and closed; serializes Submit
	bufs   map[uint32]buffer
	mods   map[uint32]*module
	closed bool

	fault   atomic.Pointer[error] // the context's sticky error, once it faulted
	closing atomic.Bool           // Close began: the completer flushes

	undelivered atomic.Int64
	drained     chan struct{} // signalled when undelivered drops to zero
}

type buffer struct {
	ptr  devptr
	size uint64
}

type module struct {
	m     cuModule
	funcs map[string]cuFunction
}

// channel is one channel: a stream and its markers. Fields below mu are
// guarded by it.
type channel struct {
	vm     *cudaVM
	idx    int
	engine int // unique among the backend's channels (see engineOf)
	stream cuStream
	host   unsafe.Pointer // this channel's markerStride bytes of the marker block
	dev    devptr         // their device address

	mu        sync.Mutex
	seq       uint64 // the last marker value issued
	q         []item // submitted, not yet delivered, in order
	startSeq  uint64 // the command whose start was seen, and when
	startAt   int64
	lastEnd   int64 // when the last command's end was seen
	quietFrom int64 // since when the head made no progress

	truthNs, truthKernels atomic.Int64 // the THROTTLE kernels' own records
}

// item is one submitted command.
type item struct {
	seq      uint64 // its markers; 0: it never went to the GPU
	tag      uint64
	op       abi.Opcode
	code     abi.ErrorCode
	submitAt int64
	endAt    int64 // when its end marker was first seen, if its record was not there yet
}

func (ch *channel) word(off uintptr) *uint64 { return (*uint64)(unsafe.Add(ch.host, off)) }

// slotOff is where the THROTTLE with marker value seq leaves its record.
func slotOff(seq uint64) uintptr { return offSlots + uintptr(seq%truthSlots)*slotSize }

// Each channel is its own "engine" in the status: the GPU time-slices
// between contexts, so the commands of several channels are in progress at
// once and none of them can be told to be the one on the GPU at a given
// instant. As distinct engines, the estimator splits such stretches evenly
// between them, which is what time slicing does on average.

// Attach creates the VM's context, its streams and marker block, loads the
// throttle kernel and registers the heap for DMA.
func (b *Backend) Attach(spec backend.VMSpec) (backend.VM, error) {
	if spec.Channels <= 0 {
		return nil, fmt.Errorf("attaching VM %d: %w: %d channels", spec.ID, backend.ErrInvalid, spec.Channels)
	}
	if spec.Complete == nil {
		return nil, fmt.Errorf("attaching VM %d: %w: no Complete callback", spec.ID, backend.ErrInvalid)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("attaching VM %d: %w", spec.ID, backend.ErrClosed)
	}
	if _, dup := b.vms[spec.ID]; dup {
		return nil, fmt.Errorf("attaching VM %d: %w: already attached", spec.ID, backend.ErrInvalid)
	}
	v := &cudaVM{
		b: b, id: spec.ID, name: spec.Name, complete: spec.Complete, heap: spec.Heap,
		bufs: map[uint32]buffer{}, mods: map[uint32]*module{}, drained: make(chan struct{}, 1),
	}
	if err := v.create(spec.Channels); err != nil {
		return nil, fmt.Errorf("attaching VM %d (%s) to %s: %w", spec.ID, spec.Name, b.name, err)
	}
	b.vms[spec.ID] = v
	b.publishChansLocked()
	return v, nil
}

// create makes the context and everything in it; on failure it destroys
// what it made.
func (v *cudaVM) create(channels int) error {
	d := v.b.d
	// CtxCreate makes the new context current on the locked thread. The
	// deferred cleanup looks at what the function returns, so an err
	// declared in an inner scope cannot hide a failure from it.
	return v.b.inCtx(0, func() (err error) {
		if v.ctx, err = d.CtxCreate(v.b.dev); err != nil {
			return fmt.Errorf("creating a context: %w", err)
		}
		defer func() {
			if err != nil {
				_ = d.CtxDestroy(v.ctx) // frees everything made in it
			}
		}()
		if err = d.CtxSetCurrent(v.ctx); err != nil {
			return fmt.Errorf("making the context current: %w", err)
		}
		var tmod cuModule // freed with the context
		if tmod, err = d.ModuleLoadData(append([]byte(throttlePTX), 0)); err != nil {
			return fmt.Errorf("loading the throttle kernel: %w", err)
		}
		if v.throttle, err = d.ModuleGetFunction(tmod, throttleName); err != nil {
			return fmt.Errorf("finding the throttle kernel: %w", err)
		}
		size := uint64(channels * markerStride)
		if v.marks, err = d.MemHostAlloc(size); err != nil {
			return fmt.Errorf("allocating %d bytes of mapped host memory for markers: %w", size, err)
		}
		clear(unsafe.Slice((*byte)(v.marks), size))
		if v.marksDev, err = d.MemHostGetDevicePointer(v.marks); err != nil {
			return fmt.Errorf("mapping the markers: %w", err)
		}
		if len(v.heap) > 0 {
			if err = d.MemHostRegister(unsafe.Pointer(&v.heap[0]), uint64(len(v.heap))); err != nil {
				return fmt.Errorf("registering the %d-byte heap for DMA: %w", len(v.heap), err)
			}
			if v.heapDev, err = d.MemHostGetDevicePointer(unsafe.Pointer(&v.heap[0])); err != nil {
				return fmt.Errorf("mapping the heap: %w", err)
			}
		}
		for i := range channels {
			s, err := d.StreamCreate()
			if err != nil {
				return fmt.Errorf("creating the stream of channel %d: %w", i, err)
			}
			off := uintptr(i * markerStride)
			v.b.nextEngine++
			v.chans = append(v.chans, &channel{
				vm: v, idx: i, engine: v.b.nextEngine, stream: s, host: unsafe.Add(v.marks, off), dev: v.marksDev + devptr(off),
			})
		}
		return nil
	})
}

// Submit queues cmd on its channel's stream, or completes it in its place
// with the code it earned.
func (v *cudaVM) Submit(channel int, cmd abi.Command, tag uint64) error {
	if channel < 0 || channel >= len(v.chans) {
		return fmt.Errorf("submitting to channel %d of VM %d: %w: it has %d", channel, v.id, backend.ErrInvalid, len(v.chans))
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return fmt.Errorf("submitting to VM %d: %w", v.id, backend.ErrClosed)
	}
	ch := v.chans[channel]
	it := item{tag: tag, op: cmd.Op, submitAt: v.b.now()}
	if v.fault.Load() != nil {
		it.code = abi.ErrDevice
	} else {
		err := v.b.inCtx(v.ctx, func() error {
			var err error
			it.seq, it.code, err = v.issue(ch, &cmd)
			return err
		})
		if err != nil {
			// The context itself failed: this VM's GPU work is over.
			v.setFault(err)
			it.code = abi.ErrDevice
		}
	}
	ch.mu.Lock()
	if len(ch.q) == 0 {
		ch.quietFrom = it.submitAt
	}
	ch.q = append(ch.q, it)
	ch.mu.Unlock()
	v.undelivered.Add(1)
	v.b.outstanding.Add(1)
	v.b.wakeup()
	return nil
}

// setFault records the context's sticky error (the first one).
func (v *cudaVM) setFault(err error) {
	v.fault.CompareAndSwap(nil, &err)
}

// Fault is the error that ended the VM's context, or nil.
func (v *cudaVM) Fault() error {
	if p := v.fault.Load(); p != nil {
		return *p
	}
	return nil
}

// Close completes the VM's outstanding commands (those whose end marker was
// written normally, the rest with abi.ErrShutdown), waits for its streams and
// destroys its context. It must not be called from a Complete callback.
func (v *cudaVM) Close() error {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return fmt.Errorf("closing VM %d: %w", v.id, backend.ErrClosed)
	}
	v.closed = true
	v.closing.Store(true)
	v.mu.Unlock()
	b := v.b
	b.wakeup()
	for v.undelivered.Load() != 0 {
		<-v.drained
	}
	b.mu.Lock()
	delete(b.vms, v.id)
	b.publishChansLocked()
	b.mu.Unlock()
	// Nobody reads the markers once a sweep that began before the removal
	// has ended.
	b.sweeping.Lock()
	//lint:ignore SA2001 a barrier: it waits out sweeps that began before the removal
	b.sweeping.Unlock()
	var errs []error
	err := b.inCtx(v.ctx, func() error {
		for _, ch := range v.chans {
			// Queued work of a closing VM still runs to its end (kernels
			// are not cancelled): wait for it before freeing what it
			// writes. A faulted context answers at once.
			_ = b.d.StreamSynchronize(ch.stream)
			_ = b.d.StreamDestroy(ch.stream)
		}
		if v.heapDev != 0 {
			if err := b.d.MemHostUnregister(unsafe.Pointer(&v.heap[0])); err != nil && v.Fault() == nil {
				errs = append(errs, fmt.Errorf("unregistering the heap: %w", err))
			}
		}
		if err := b.d.MemFreeHost(v.marks); err != nil && v.Fault() == nil {
			errs = append(errs, fmt.Errorf("freeing the markers: %w", err))
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	if err := b.inCtx(0, func() error { return b.d.CtxDestroy(v.ctx) }); err != nil {
		errs = append(errs, fmt.Errorf("destroying the context: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("closing VM %d: %w", v.id, err)
	}
	return nil
}
