package sim

import (
	"sync/atomic"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall"
)

// program is one of the built-in GPU programs of abi/kernels.go.
type program struct {
	blobSize   uint32
	heapFields []int // fields that must carry a RelocHeap relocation (out included)
	fastcall   bool  // flags may hold abi.SysFlagFastcall
	// check validates the program's own arguments (after the common ones).
	check func(l *launch) abi.ErrorCode
	// call is what caller c does (programs run caller by caller), or group
	// what work-group g does (programs that use the whole group).
	call  func(l *launch, c int) error
	group func(l *launch, g int) error
}

// programs maps kernel names to programs.
var programs = map[string]*program{
	abi.KernelSysOne: {blobSize: abi.SysOneBlobSize, heapFields: []int{abi.ProgOut}, fastcall: true,
		check: checkSysOne, call: callSysOne},
	abi.KernelSysNull: {blobSize: abi.NullBlobSizeSlots, heapFields: []int{abi.ProgOut},
		check: checkNull, call: callNull},
	abi.KernelPreadSwp: {blobSize: abi.SweepBlobSize, heapFields: []int{abi.ProgOut, abi.SweepHeap},
		check: checkSweep, call: callSweep},
	abi.KernelWordCount: {blobSize: abi.WCBlobSize, heapFields: []int{abi.ProgOut, abi.WCHeap},
		check: checkWordCount, group: groupWordCount},
}

// reloc is one relocation applied to a launch's blob.
type reloc struct {
	off  uint32
	kind uint32
}

// progArgs is the common head of every program's blob (abi.ProgArgs*).
type progArgs struct {
	out          uint64 // heap offset
	first, slots uint32
	gran, order  uint8 // order less abi.ProgOwnSlots
	own          bool  // abi.ProgOwnSlots: the callers own their slots
	context      uint8
	flags        uint8
	iterations   uint32
}

// launch is a validated LAUNCH of a built-in program, with private copies of
// its arguments; run runs it.
type launch struct {
	prog     *program
	blob     []byte // relocated copy of the args
	relocs   []reloc
	heap     []byte
	area     *slotcall.Area // the VM's syscall area, once RelocSyscall named it
	ringCtr  *atomic.Uint64 // its request ring's claim counter, once RelocSyscallRing named it
	useRing  bool           // the program's calls go through the ring (checkNull)
	resident int            // work-items resident at once
	groups   int            // work-groups in the grid
	items    int            // work-items per work-group
	a        progArgs

	exec // the running state (progrun.go)
}

// checkArgs decodes and validates the common arguments: the blob holds at
// least the program's arguments (bytes beyond are ignored), sys carries
// RelocSyscall and the pointer fields RelocHeap, the slots lie in the area,
// granularity, ordering and flags are known and iterations at most
// maxIterations. Any failure is ErrBadRecord.
func (l *launch) checkArgs(v *simVM) abi.ErrorCode {
	p := l.prog
	if uint32(len(l.blob)) < p.blobSize || !l.relocated(abi.ProgSys, abi.RelocSyscall) || l.area == nil {
		return abi.ErrBadRecord
	}
	for _, f := range p.heapFields {
		if !l.relocated(f, abi.RelocHeap) {
			return abi.ErrBadRecord
		}
	}
	b := l.blob
	a := progArgs{
		out: le.Uint64(b[abi.ProgOut:]), first: le.Uint32(b[abi.ProgFirstSlot:]), slots: le.Uint32(b[abi.ProgSlots:]),
		gran: b[abi.ProgGranularity], order: b[abi.ProgOrdering], context: b[abi.ProgContext],
		flags: b[abi.ProgFlags], iterations: le.Uint32(b[abi.ProgIterations:]),
	}
	// ProgOwnSlots lets a GPU caller skip its lock and state reads; the
	// sim's callers claim by compare-and-swap either way, so it changes
	// nothing here.
	a.own, a.order = a.order&abi.ProgOwnSlots != 0, a.order&^abi.ProgOwnSlots
	known := abi.SysFlagBlocking
	if p.fastcall {
		known |= abi.SysFlagFastcall
	}
	switch {
	case a.gran > abi.ProgKernel, a.order > abi.ProgRelaxed, a.flags&^known != 0, a.iterations > maxIterations:
		return abi.ErrBadRecord
	case uint64(a.first)+uint64(a.slots) > uint64(v.area.Slots()):
		return abi.ErrBadRecord
	}
	l.a = a
	return abi.OK
}

// callers is how many callers the launch has, by granularity.
func (l *launch) callers() int {
	switch l.a.gran {
	case abi.ProgWorkItem:
		return l.groups * l.items
	case abi.ProgWorkGroup:
		return l.groups
	}
	return 1
}

// slot is caller c's slot.
func (l *launch) slot(c int) uint32 { return l.a.first + uint32(c%int(l.a.slots)) }

// heapRange checks that n records of size bytes from off lie in the heap.
func (l *launch) heapRange(off uint64, n int, size uint64) abi.ErrorCode {
	if size != 0 && uint64(n) > (1<<62)/size {
		return abi.ErrHeapRange
	}
	if _, ok := span(l.heap, off, uint64(n)*size); !ok {
		return abi.ErrHeapRange
	}
	return abi.OK
}

// u64 and put64 read and write the blob copy and the heap.
func (l *launch) u64(off int) uint64 { return le.Uint64(l.blob[off:]) }
func (l *launch) u32(off int) uint32 { return le.Uint32(l.blob[off:]) }

// putHeap64 writes v at heap offset off, if it lies in the heap (it was
// checked at launch; the check again keeps a bug from panicking the host).
func (l *launch) putHeap64(off uint64, v uint64) {
	if b, ok := span(l.heap, off, 8); ok {
		le.PutUint64(b, v)
	}
}
