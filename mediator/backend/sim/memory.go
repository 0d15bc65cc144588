package sim

import (
	"math"

	"github.com/sluice-gpu/sluice/api/abi"
)

// execFunc carries out a command's effect when it starts, or says why it
// cannot run.
type execFunc func(s *Sim, v *simVM, c *abi.Command) abi.ErrorCode

// execTable maps opcodes to their effects. A missing entry is an unknown
// opcode; abi.Opcodes() all have one (TestExecTableCoversOpcodes).
var execTable = [...]execFunc{
	abi.OpNop:        execNothing,
	abi.OpFence:      execNothing, // the mediator publishes the value on completion
	abi.OpThrottle:   execNothing,
	abi.OpMemset:     execMemset,
	abi.OpCopy:       execCopy,
	abi.OpAlloc:      execAlloc,
	abi.OpFree:       execFree,
	abi.OpLoadModule: execLoadModule,
	abi.OpLaunch:     execLaunch,
}

func (s *Sim) execLocked(v *simVM, c *abi.Command) abi.ErrorCode {
	if int(c.Op) >= len(execTable) || execTable[c.Op] == nil {
		return abi.ErrBadOpcode
	}
	return execTable[c.Op](s, v, c)
}

func execNothing(*Sim, *simVM, *abi.Command) abi.ErrorCode { return abi.OK }

func execAlloc(s *Sim, v *simVM, c *abi.Command) abi.ErrorCode {
	if _, used := v.bufs[c.Handle]; used || c.Handle == 0 {
		return abi.ErrBadHandle
	}
	if c.Size == 0 {
		return abi.ErrBadRecord
	}
	if c.Size > s.p.Memory-s.memUsed || c.Size > math.MaxInt || !v.fitsLocked(c.Size) || len(v.bufs) >= maxBuffers {
		return abi.ErrNoMemory
	}
	h, b, d := c.Handle, newDevBuffer(c.Size, c.Handle, v.dev), v.dev // no backing until written
	v.bufs[h] = b
	s.memUsed += c.Size
	v.memUsed += c.Size
	s.moving = func() { d.alloc(h, b) }
	return abi.OK
}

// execFree drops the handle and gives its bytes back at once. A MEMSET or
// COPY that started earlier and is still moving data holds the buffer
// itself, not the handle: it finishes on a buffer nobody can name any
// more, which the garbage collector reclaims after it. The device file
// releases the buffer's pages after it too (the FREE's record follows
// the movement's, in the mover).
func execFree(s *Sim, v *simVM, c *abi.Command) abi.ErrorCode {
	b, ok := v.bufs[c.Handle]
	if !ok {
		return abi.ErrBadHandle
	}
	delete(v.bufs, c.Handle)
	s.memUsed -= b.size
	v.memUsed -= b.size
	h, d := c.Handle, v.dev
	s.moving = func() { d.freeBuf(h, b) }
	return abi.OK
}

// fitsLocked reports whether n more bytes stay within the VM's quota.
func (v *simVM) fitsLocked(n uint64) bool {
	return v.quota == 0 || v.memUsed <= v.quota && n <= v.quota-v.memUsed
}

// execMemset checks a MEMSET and leaves its data movement to the VM's
// mover (s.moving).
func execMemset(s *Sim, v *simVM, c *abi.Command) abi.ErrorCode {
	b, ok := v.bufs[c.Handle]
	if !ok {
		return abi.ErrBadHandle
	}
	if c.Value > 0xff {
		return abi.ErrBadRecord
	}
	if !inside(b.size, c.Offset, c.Length) {
		return abi.ErrBufferRange
	}
	off, n, val := c.Offset, c.Length, byte(c.Value)
	s.moveLocked(n, func() { b.memset(off, n, val) })
	return abi.OK
}

// execCopy checks a COPY between the heap and a buffer, or between
// buffers, and leaves its data movement to the VM's mover. The ABI decoder
// checked the heap range against the layout; the heap slice the VM
// attached with is the truth, so it is checked again.
func execCopy(s *Sim, v *simVM, c *abi.Command) abi.ErrorCode {
	dst, ok := v.bufs[c.Handle]
	if !ok {
		return abi.ErrBadHandle
	}
	off, n := c.Offset, c.Length
	switch c.Dir {
	case abi.CopyHostToDevice, abi.CopyDeviceToHost:
		if !inside(dst.size, off, n) {
			return abi.ErrBufferRange
		}
		heap, ok := span(v.heap, c.HeapOff, n)
		if !ok {
			return abi.ErrHeapRange
		}
		if c.Dir == abi.CopyHostToDevice {
			s.moveLocked(n, func() { dst.write(off, heap) })
		} else {
			s.moveLocked(n, func() { dst.read(off, heap) })
		}
	case abi.CopyDeviceToDevice:
		src, ok := v.bufs[c.SrcHandle]
		if !ok {
			return abi.ErrBadHandle
		}
		soff := c.HeapOff
		if !inside(dst.size, off, n) || !inside(src.size, soff, n) {
			return abi.ErrBufferRange
		}
		s.moveLocked(n, func() { copyBuffer(dst, off, src, soff, n) })
	default:
		return abi.ErrBadRecord
	}
	return abi.OK
}

// moveLocked leaves a starting command's data movement of n bytes for
// dispatchEngineLocked to queue (nothing for n = 0).
func (s *Sim) moveLocked(n uint64, move func()) {
	if n > 0 {
		s.moving, s.data = move, true
	}
}

// inside reports whether [off, off+n) lies within [0, size), without
// overflow.
func inside(size, off, n uint64) bool { return off <= size && n <= size-off }

// span is b[off:off+n] if that lies inside b, without overflow.
func span(b []byte, off, n uint64) ([]byte, bool) {
	if off > uint64(len(b)) || n > uint64(len(b))-off {
		return nil, false
	}
	return b[off : off+n], true
}

func fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}
