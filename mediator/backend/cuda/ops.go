package cuda

import (
	"bytes"
	"errors"
	"math"
	"math/bits"
	"unsafe"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend/cuda/cubin"
)

// work is a command's GPU work, queued on a stream.
type work func(s cuStream) error

// launchThrottle launches command seq of ch, a THROTTLE of ns, on ch's
// stream, its parameters packed in the worker's own buffer (the driver
// copies them at the launch): no allocation on the worker's busiest path.
func (w *worker) launchThrottle(ch *wchan, seq, ns uint64) error {
	slot := ch.dev + devptr(w.blk.l.slotOff(seq))
	putThrottleArgs(w.targs[:], slot, ns, w.cfg.GapNs, seq, ch.dev+offStart, ch.dev+offEnd)
	return w.d.LaunchKernel(w.throttle, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, ch.stream, w.targs[:])
}

// prepare checks c against the VM's handles and heap and returns the work
// that carries it out (nil for markers alone). Handle tables change here, in
// submission order; the GPU applies the same changes in stream order.
func (w *worker) prepare(c *abi.Command) (work, abi.ErrorCode) {
	d := w.d
	switch c.Op {
	case abi.OpNop, abi.OpFence, abi.OpThrottle:
		return nil, abi.OK // a THROTTLE's launch is issue's (launchThrottle)
	case abi.OpAlloc:
		return w.prepareAlloc(c)
	case abi.OpFree:
		b, ok := w.bufs[c.Handle]
		if !ok {
			return nil, abi.ErrBadHandle
		}
		delete(w.bufs, c.Handle)
		w.setMemUsed(w.memUsed - b.size)
		return func(s cuStream) error { return d.MemFreeAsync(b.ptr, s) }, abi.OK
	case abi.OpMemset:
		b, ok := w.bufs[c.Handle]
		if !ok {
			return nil, abi.ErrBadHandle
		}
		if !inside(b.size, c.Offset, c.Length) {
			return nil, abi.ErrBufferRange
		}
		if c.Length == 0 {
			return nil, abi.OK
		}
		at, v, n := b.ptr+devptr(c.Offset), byte(c.Value), c.Length
		return func(s cuStream) error { return d.MemsetD8Async(at, v, n, s) }, abi.OK
	case abi.OpCopy:
		return w.prepareCopy(c)
	case abi.OpLoadModule:
		return nil, w.loadModule(c)
	case abi.OpLaunch:
		return w.prepareLaunch(c)
	}
	return nil, abi.ErrBadOpcode
}

func (w *worker) prepareAlloc(c *abi.Command) (work, abi.ErrorCode) {
	if _, used := w.bufs[c.Handle]; used {
		return nil, abi.ErrBadHandle
	}
	if c.Size == 0 {
		return nil, abi.ErrBadRecord
	}
	if !w.fits(c.Size) {
		return nil, abi.ErrNoMemory
	}
	// The allocation is stream ordered, but its address is known now: the
	// handle is usable by the commands after it.
	size, handle := c.Size, c.Handle
	return func(s cuStream) error {
		p, err := w.d.MemAllocAsync(size, s)
		if err == nil {
			w.bufs[handle] = buffer{ptr: p, size: size}
			w.setMemUsed(w.memUsed + size)
		}
		return err
	}, abi.OK
}

// fits reports whether n more bytes of buffers, modules or local memory
// stay within the VM's quota, which the mediator keeps in the shared block
// (0: none; the GPU's own limit is the driver's out-of-memory). The quota
// is read at every ALLOC, LOAD_MODULE and LAUNCH that grows the local
// memory, so a change applies to the next one; a quota below what the VM
// holds only refuses them until it has freed enough. No one charge may be
// larger than the device, quota or not: it could not be had, and with at
// most maxModules modules and the driver's buffers each charge that small
// keeps the sum from wrapping (a guest's cubin says what it likes).
func (w *worker) fits(n uint64) bool {
	if n > w.devMem {
		return false
	}
	q := w.blk.load(offQuota)
	return q == 0 || w.memUsed <= q && n <= q-w.memUsed
}

// setMemUsed records what the VM's buffers, modules and local memory
// hold, for the mediator to read.
func (w *worker) setMemUsed(n uint64) {
	w.memUsed = n
	w.blk.store(offMemUsed, n)
}

func (w *worker) prepareCopy(c *abi.Command) (work, abi.ErrorCode) {
	d := w.d
	dst, ok := w.bufs[c.Handle]
	if !ok {
		return nil, abi.ErrBadHandle
	}
	if !inside(dst.size, c.Offset, c.Length) {
		return nil, abi.ErrBufferRange
	}
	at := dst.ptr + devptr(c.Offset)
	switch c.Dir {
	case abi.CopyHostToDevice, abi.CopyDeviceToHost:
		if !inside(uint64(len(w.heap)), c.HeapOff, c.Length) {
			return nil, abi.ErrHeapRange
		}
		if c.Length == 0 {
			return nil, abi.OK
		}
		host, n := unsafe.Pointer(&w.heap[c.HeapOff]), c.Length
		if c.Dir == abi.CopyHostToDevice {
			return func(s cuStream) error { return d.MemcpyHtoDAsync(at, host, n, s) }, abi.OK
		}
		return func(s cuStream) error { return d.MemcpyDtoHAsync(host, at, n, s) }, abi.OK
	case abi.CopyDeviceToDevice:
		src, ok := w.bufs[c.SrcHandle]
		if !ok {
			return nil, abi.ErrBadHandle
		}
		if !inside(src.size, c.HeapOff, c.Length) {
			return nil, abi.ErrBufferRange
		}
		if c.Length == 0 {
			return nil, abi.OK
		}
		from, n := src.ptr+devptr(c.HeapOff), c.Length
		return func(s cuStream) error { return d.MemcpyDtoDAsync(at, from, n, s) }, abi.OK
	}
	return nil, abi.ErrBadRecord
}

// maxModules is how many modules a VM may load into one context: each
// takes the driver's bookkeeping on the host and on the device, and a
// module is never unloaded.
const maxModules = 4096

// loadModule loads a copy of the image (the heap is the guest's: it may
// change under us) when the command is submitted. What the module takes of
// device memory (its globals, constants and code: cubin.Footprint) counts
// against the VM's quota like a buffer, for as long as the context lives;
// PTX is compiled to a cubin by the driver's linker first, so that it is
// measured before it loads. A fatbin is refused (abi.ErrUnsupported): the
// driver picks one of its images, whose size is not known before.
func (w *worker) loadModule(c *abi.Command) abi.ErrorCode {
	if _, used := w.mods[c.Handle]; used {
		return abi.ErrBadHandle
	}
	if c.Format == abi.ModuleSim {
		// The sim backend's built-in programs: a GPU runs their PTX.
		return abi.ErrUnsupported
	}
	if !inside(uint64(len(w.heap)), c.HeapOff, c.Length) || c.Length == 0 {
		return abi.ErrHeapRange
	}
	if len(w.mods) >= maxModules {
		return abi.ErrNoMemory
	}
	image := make([]byte, c.Length, c.Length+1)
	copy(image, w.heap[c.HeapOff:])
	if c.Format == abi.ModulePTX {
		// PTX is text, NUL terminated for the driver; a NUL inside ends it.
		if i := bytes.IndexByte(image, 0); i >= 0 {
			image = image[:i+1]
		} else {
			image = append(image, 0)
		}
		var err error
		if image, err = w.d.LinkPTX(image); err != nil {
			return codeOf(err)
		}
	}
	size, err := cubin.Footprint(image)
	switch {
	case errors.Is(err, cubin.ErrFatbin):
		return abi.ErrUnsupported
	case err != nil:
		return abi.ErrBadRecord // an image the driver would not load as a cubin
	case !w.fits(size): // a guest's cubin says what it likes
		return abi.ErrNoMemory
	}
	m, err := w.d.ModuleLoadData(image)
	if err != nil {
		return codeOf(err)
	}
	w.mods[c.Handle] = &module{m: m, funcs: map[string]kernel{}}
	w.setMemUsed(w.memUsed + size)
	return abi.OK
}

func (w *worker) prepareLaunch(c *abi.Command) (work, abi.ErrorCode) {
	mod, ok := w.mods[c.Handle]
	if !ok {
		return nil, abi.ErrBadHandle
	}
	heap := uint64(len(w.heap))
	blob := abi.LaunchBlobSize(c.ArgsLen, c.Relocs)
	if !inside(heap, c.NameOff, uint64(c.NameLen)) || !inside(heap, c.ArgsOff, blob) {
		return nil, abi.ErrHeapRange
	}
	name := string(w.heap[c.NameOff : c.NameOff+uint64(c.NameLen)])
	k, ok := mod.funcs[name]
	if !ok {
		f, err := w.d.ModuleGetFunction(mod.m, name)
		if err != nil {
			return nil, codeOf(err)
		}
		local, err := w.d.FuncLocalSize(f)
		if err != nil {
			return nil, codeOf(err)
		}
		k = kernel{f: f, local: local}
		mod.funcs[name] = k
	}
	grow := w.localGrowth(k.local)
	if grow > 0 && !w.fits(grow) {
		return nil, abi.ErrNoMemory
	}
	// Copy the blob out, then relocate the copy.
	raw := make([]byte, blob)
	copy(raw, w.heap[c.ArgsOff:])
	args := raw[:c.ArgsLen]
	relocs := raw[(uint64(c.ArgsLen)+7)&^7:]
	if code := w.relocate(args, relocs); code != abi.OK {
		return nil, code
	}
	grid, block, shared := c.Grid, c.Block, c.SharedMem
	return func(s cuStream) error {
		err := w.d.LaunchKernel(k.f, grid, block, shared, s, args)
		if err == nil && grow > 0 {
			w.local = k.local
			w.setMemUsed(w.memUsed + grow)
		}
		return err
	}, abi.OK
}

// localGrowth is the device memory a launch of a kernel whose threads use
// local bytes each adds to the context's. The driver holds local memory
// for every thread the device can run at once, as much as the most any
// kernel launched in the context used (the stack size at least), and
// keeps it when it grows (an H100 took 37.6 GB more for a kernel of 200
// KiB a thread after one of 64 KiB). So the VM is charged the growth, at
// the launch that causes it, against its quota like an ALLOC.
func (w *worker) localGrowth(local uint64) uint64 {
	if local <= w.local {
		return 0
	}
	hi, lo := bits.Mul64(local-w.local, w.resident)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

// relocate rewrites the u64 at each relocation's offset: a buffer handle
// becomes its device address, a heap offset the registered heap's, and a
// syscall relocation (whose u64 must be 0) the registered syscall area's
// (ErrUnsupported for a VM without one).
func (w *worker) relocate(args, relocs []byte) abi.ErrorCode {
	for i := 0; i+abi.RelocSize <= len(relocs); i += abi.RelocSize {
		off := uint64(le.Uint32(relocs[i:]))
		kind := le.Uint32(relocs[i+4:])
		if !inside(uint64(len(args)), off, 8) {
			return abi.ErrBadRecord
		}
		val := le.Uint64(args[off:])
		switch kind {
		case abi.RelocBuffer:
			if val == 0 || val > abi.MaxHandle {
				return abi.ErrBadHandle
			}
			b, ok := w.bufs[uint32(val)]
			if !ok {
				return abi.ErrBadHandle
			}
			le.PutUint64(args[off:], uint64(b.ptr))
		case abi.RelocHeap:
			if w.heapDev == 0 || val >= uint64(len(w.heap)) {
				return abi.ErrHeapRange
			}
			le.PutUint64(args[off:], uint64(w.heapDev)+val)
		case abi.RelocSyscall, abi.RelocSyscallRing:
			dev := w.sysDev
			if kind == abi.RelocSyscallRing {
				dev = w.ringDev
			}
			if val != 0 {
				return abi.ErrBadRecord
			}
			if dev == 0 {
				return abi.ErrUnsupported
			}
			le.PutUint64(args[off:], uint64(dev))
		default:
			return abi.ErrBadRecord
		}
	}
	return abi.OK
}

// inside reports whether [off, off+n) lies within [0, size), without
// overflow.
func inside(size, off, n uint64) bool { return off <= size && n <= size-off }

// codeOf maps a driver error to the channel error code the guest sees.
func codeOf(err error) abi.ErrorCode {
	switch resultOf(err) {
	case 0:
		if err == nil {
			return abi.OK
		}
		return abi.ErrDevice
	case cudaErrorOutOfMemory:
		return abi.ErrNoMemory
	case cudaErrorInvalidImage, cudaErrorInvalidPTX, cudaErrorNoBinaryForGPU, cudaErrorNotFound,
		cudaErrorInvalidValue, cudaErrorLaunchOutOfRes:
		// The record asked for something this GPU cannot do: an image it
		// cannot load, a kernel the module lacks, launch dimensions or
		// shared memory beyond its limits.
		return abi.ErrBadRecord
	}
	return abi.ErrDevice
}
