package sim

import (
	"math"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall"
)

// sluice_sys_one: caller 0 makes one blocking call and writes ret and errno
// to out.

func checkSysOne(l *launch) abi.ErrorCode {
	if l.u32(abi.SysOneNumber) > math.MaxUint16 {
		return abi.ErrBadRecord
	}
	return l.heapRange(l.a.out, 1, abi.SysOneOutSize)
}

func callSysOne(l *launch, c int) error {
	if c != 0 {
		return nil
	}
	req := slotcall.Request{Number: uint16(l.u32(abi.SysOneNumber)), Flags: l.a.flags | abi.SysFlagBlocking}
	for i := range req.Args {
		req.Args[i] = l.u64(abi.SysOneArgs + 8*i)
	}
	r, err := l.call(c, req)
	if err != nil {
		return err
	}
	l.putHeap64(l.a.out, uint64(r.Ret))
	l.putHeap64(l.a.out+8, uint64(r.Errno))
	return nil
}

// sluice_sys_null: iterations SysNull calls per caller, flags as given; the
// round trip of each, in wall ns saturated to 32 bits, goes to
// out[caller*iterations + i].

func checkNull(l *launch) abi.ErrorCode {
	// A blob with the ring fields, its counter relocated and its length the
	// area's: the calls go through the request ring. The PTX program only
	// looks at ring and ring_slots being nonzero: a wrong ring_slots there
	// mixes up the launch's own calls; the sim refuses it.
	if len(l.blob) >= abi.NullBlobSize && l.relocated(abi.NullRing, abi.RelocSyscallRing) {
		if l.u32(abi.NullRingSlots) != l.area.Slots() {
			return abi.ErrBadRecord
		}
		l.useRing = true
	}
	return l.heapRange(l.a.out, l.callers()*int(l.a.iterations), abi.NullOutPerCall)
}

func callNull(l *launch, c int) error {
	n := uint64(l.a.iterations)
	for i := range n {
		t0 := time.Now()
		if _, err := l.call(c, slotcall.Request{Number: abi.SysNull, Flags: l.a.flags}); err != nil {
			return err
		}
		ns := min(uint64(time.Since(t0)), math.MaxUint32)
		if b, ok := span(l.heap, l.a.out+(uint64(c)*n+i)*abi.NullOutPerCall, 4); ok {
			le.PutUint32(b, uint32(ns))
		}
	}
	return nil
}

// sluice_pread_sweep: caller c of N preads chunks c, c+N, ... of [0,
// file_size) into its buffer buf + c*chunk, max(iterations, 1) times over,
// and writes bytes read, failed calls and the sum of the bytes read to
// out + c*24.

func checkSweep(l *launch) abi.ErrorCode {
	chunk, size := l.u64(abi.SweepChunk), l.u64(abi.SweepFileSize)
	if l.u64(abi.SweepHeap) != 0 || (size > 0 && chunk == 0) {
		return abi.ErrBadRecord
	}
	if code := l.heapRange(l.u64(abi.SweepBuf), l.callers(), chunk); code != abi.OK {
		return code
	}
	return l.heapRange(l.a.out, l.callers(), abi.SweepOutPerCall)
}

func callSweep(l *launch, c int) error {
	chunk, size := l.u64(abi.SweepChunk), l.u64(abi.SweepFileSize)
	if size == 0 {
		l.putSweep(c, 0, 0, 0)
		return nil
	}
	n := uint64(l.callers())
	buf := l.u64(abi.SweepBuf) + uint64(c)*chunk
	chunks := size/chunk + min(size%chunk, 1)
	var bytes, failed, sum uint64
	for range max(l.a.iterations, 1) {
		for k := uint64(c); k < chunks; k += n {
			off := k * chunk
			want := min(chunk, size-off) // the last chunk may be short
			r, err := l.call(c, slotcall.Request{Number: abi.SysPread64, Flags: l.a.flags | abi.SysFlagBlocking,
				Args: [6]uint64{uint64(l.u32(abi.SweepFD)), buf, want, off}})
			if err != nil {
				return err
			}
			if r.Errno != 0 {
				failed++
			} else if r.Ret > 0 {
				got := min(uint64(r.Ret), chunk)
				bytes += got
				sum += sumBytes(l.heap, buf, got)
			}
			if k > chunks-n { // k+n would wrap
				break
			}
		}
	}
	l.putSweep(c, bytes, failed, sum)
	return nil
}

func (l *launch) putSweep(c int, bytes, failed, sum uint64) {
	out := l.a.out + uint64(c)*abi.SweepOutPerCall
	l.putHeap64(out, bytes)
	l.putHeap64(out+8, failed)
	l.putHeap64(out+16, sum)
}

func sumBytes(heap []byte, off, n uint64) uint64 {
	b, _ := span(heap, off, n)
	var s uint64
	for _, x := range b {
		s += uint64(x)
	}
	return s
}
