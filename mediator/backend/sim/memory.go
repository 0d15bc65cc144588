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
	if c.Size > s.p.Memory-s.memUsed || c.Size > math.MaxInt || !v.fitsLocked(c.Size) {
		return abi.ErrNoMemory
	}
	v.bufs[c.Handle] = make([]byte, c.Size)
	s.memUsed += c.Size
	v.memUsed += c.Size
	return abi.OK
}

func execFree(s *Sim, v *simVM, c *abi.Command) abi.ErrorCode {
	b, ok := v.bufs[c.Handle]
	if !ok {
		return abi.ErrBadHandle
	}
	delete(v.bufs, c.Handle)
	s.memUsed -= uint64(len(b))
	v.memUsed -= uint64(len(b))
	return abi.OK
}

// fitsLocked reports whether n more bytes stay within the VM's quota.
func (v *simVM) fitsLocked(n uint64) bool {
	return v.quota == 0 || v.memUsed <= v.quota && n <= v.quota-v.memUsed
}

func execMemset(_ *Sim, v *simVM, c *abi.Command) abi.ErrorCode {
	b, ok := v.bufs[c.Handle]
	if !ok {
		return abi.ErrBadHandle
	}
	if c.Value > 0xff {
		return abi.ErrBadRecord
	}
	dst, ok := span(b, c.Offset, c.Length)
	if !ok {
		return abi.ErrBufferRange
	}
	fill(dst, byte(c.Value))
	return abi.OK
}

// execCopy moves bytes between the heap and a buffer, or between buffers.
// The ABI decoder checked the heap range against the layout; the heap slice
// the VM attached with is the truth, so it is checked again.
func execCopy(_ *Sim, v *simVM, c *abi.Command) abi.ErrorCode {
	dst, ok := v.bufs[c.Handle]
	if !ok {
		return abi.ErrBadHandle
	}
	switch c.Dir {
	case abi.CopyHostToDevice, abi.CopyDeviceToHost:
		buf, ok := span(dst, c.Offset, c.Length)
		if !ok {
			return abi.ErrBufferRange
		}
		heap, ok := span(v.heap, c.HeapOff, c.Length)
		if !ok {
			return abi.ErrHeapRange
		}
		if c.Dir == abi.CopyHostToDevice {
			copy(buf, heap)
		} else {
			copy(heap, buf)
		}
	case abi.CopyDeviceToDevice:
		src, ok := v.bufs[c.SrcHandle]
		if !ok {
			return abi.ErrBadHandle
		}
		to, ok1 := span(dst, c.Offset, c.Length)
		from, ok2 := span(src, c.HeapOff, c.Length)
		if !ok1 || !ok2 {
			return abi.ErrBufferRange
		}
		copy(to, from) // memmove: overlap within one buffer is fine
	default:
		return abi.ErrBadRecord
	}
	return abi.OK
}

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
