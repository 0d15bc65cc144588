package gpucall

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
)

var le = binary.LittleEndian

// Result is one call's outcome.
type Result struct {
	Ret   int64     `json:"ret"`
	Errno abi.Errno `json:"errno"`
}

// Call makes one system call from one GPU work-item (KernelSysOne) in
// context ctxID and returns its result. Pointer arguments are heap offsets
// (PutString, Alloc).
func (r *Runner) Call(ctx context.Context, number uint16, ctxID uint8, args [abi.SysArgCount]uint64) (Result, error) {
	out, err := r.Alloc(abi.SysOneOutSize)
	if err != nil {
		return Result{}, err
	}
	spec := make([]byte, abi.SysOneBlobSize-abi.ProgSpecific)
	le.PutUint32(spec[abi.SysOneNumber-abi.ProgSpecific:], uint32(number))
	for i, a := range args {
		le.PutUint64(spec[abi.SysOneArgs-abi.ProgSpecific+8*i:], a)
	}
	if err := r.Launch(ctx, Launch{
		Kernel: abi.KernelSysOne, Grid: 1, Block: 1, Granularity: abi.ProgKernel,
		Context: ctxID, Flags: abi.SysFlagBlocking, Out: out, Specific: spec,
	}); err != nil {
		return Result{}, err
	}
	b, err := r.Read(out, abi.SysOneOutSize)
	if err != nil {
		return Result{}, err
	}
	return Result{Ret: int64(le.Uint64(b)), Errno: abi.Errno(le.Uint64(b[8:]))}, nil
}

// NullRun is what Null measured: per-call round trips in ns as the GPU
// threads saw them, and the launch's wall time (submit to completion).
type NullRun struct {
	Callers    int
	Iterations int
	RoundTrips []uint32
	Wall       time.Duration
}

// NullOptions are a null launch's slot flags (abi.SysFlagBlocking,
// abi.SysFlagFastcall) and whether it owns its slots (Launch.OwnSlots).
type NullOptions struct {
	Flags    uint8
	OwnSlots bool
	// Slots makes the calls through the slots even where the host reads
	// the request ring (abi.FeatureSyscallRing): by default they go
	// through the ring there.
	Slots bool
	// Ordering is the launch's ordering (abi.ProgStrong by default): at
	// work-group granularity abi.ProgRelaxed lets the group's other
	// work-items end at once, so that a group of one warp is one caller.
	Ordering uint8
}

// Null makes iterations null calls from each of grid×block work-items at
// the given granularity and returns every call's round trip.
func (r *Runner) Null(ctx context.Context, grid, block uint32, granularity uint8, iterations uint32, o NullOptions) (NullRun, error) {
	callers := int(grid * block)
	switch granularity {
	case abi.ProgWorkGroup:
		callers = int(grid)
	case abi.ProgKernel:
		callers = 1
	}
	n := uint64(callers) * uint64(iterations) * abi.NullOutPerCall
	out, err := r.Alloc(n)
	if err != nil {
		return NullRun{}, err
	}
	l := Launch{
		Kernel: abi.KernelSysNull, Grid: grid, Block: block, Granularity: granularity,
		Ordering: o.Ordering, Flags: o.Flags, Iterations: iterations, Out: out, OwnSlots: o.OwnSlots,
		Specific: make([]byte, abi.NullBlobSize-abi.ProgArgsBaseSize),
	}
	if r.Ring() && !o.Slots {
		le.PutUint32(l.Specific[abi.NullRingSlots-abi.ProgArgsBaseSize:], uint32(r.Slots()))
		l.RingRelocs = []uint32{abi.NullRing}
	}
	start := time.Now()
	if err := r.Launch(ctx, l); err != nil {
		return NullRun{}, err
	}
	run := NullRun{Callers: callers, Iterations: int(iterations), Wall: time.Since(start)}
	b, err := r.Read(out, n)
	if err != nil {
		return NullRun{}, err
	}
	run.RoundTrips = make([]uint32, len(b)/4)
	for i := range run.RoundTrips {
		run.RoundTrips[i] = le.Uint32(b[4*i:])
	}
	return run, nil
}

// WordCount counts the words of paths (in the volume, as the context sees
// it) with groups work-groups of block work-items, chunk bytes per pread.
// It returns the total and the first failure's errno of any group.
func (r *Runner) WordCount(ctx context.Context, paths []string, groups, block uint32, chunk uint64, ctxID uint8) (words, bytes uint64, errno abi.Errno, err error) {
	var list []byte
	for _, p := range paths {
		list = append(append(list, p...), 0)
	}
	pathsOff, err := r.put(list)
	if err != nil {
		return 0, 0, 0, err
	}
	buf, err := r.Alloc(uint64(groups) * chunk)
	if err != nil {
		return 0, 0, 0, err
	}
	out, err := r.Alloc(uint64(groups) * abi.WCOutPerGroup)
	if err != nil {
		return 0, 0, 0, err
	}
	spec := make([]byte, abi.WCBlobSize-abi.ProgSpecific)
	le.PutUint64(spec[abi.WCPaths-abi.ProgSpecific:], pathsOff)
	le.PutUint32(spec[abi.WCNumPaths-abi.ProgSpecific:], uint32(len(paths)))
	le.PutUint64(spec[abi.WCBuf-abi.ProgSpecific:], buf)
	le.PutUint64(spec[abi.WCChunk-abi.ProgSpecific:], chunk)
	if err := r.Launch(ctx, Launch{
		Kernel: abi.KernelWordCount, Grid: groups, Block: block, Granularity: abi.ProgWorkGroup,
		Context: ctxID, Flags: abi.SysFlagBlocking, Out: out, Specific: spec, HeapRelocs: []uint32{abi.WCHeap},
		Slots: min(uint32(r.Slots()), groups),
	}); err != nil {
		return 0, 0, 0, err
	}
	b, err := r.Read(out, uint64(groups)*abi.WCOutPerGroup)
	if err != nil {
		return 0, 0, 0, err
	}
	for g := range groups {
		p := b[g*abi.WCOutPerGroup:]
		words += le.Uint64(p)
		bytes += le.Uint64(p[8:])
		if e := abi.Errno(le.Uint64(p[16:])); e != 0 && errno == 0 {
			errno = e
		}
	}
	return words, bytes, errno, nil
}

// Sweep preads [0, size) of fd in chunk-byte pieces from callers at the
// given granularity; it returns bytes read, failed calls and the byte sum.
func (r *Runner) Sweep(ctx context.Context, fd uint32, size, chunk uint64, grid, block uint32, granularity, ordering, ctxID uint8) (bytes, failed, sum uint64, err error) {
	callers := uint64(grid) * uint64(block)
	switch granularity {
	case abi.ProgWorkGroup:
		callers = uint64(grid)
	case abi.ProgKernel:
		callers = 1
	}
	buf, err := r.Alloc(callers * chunk)
	if err != nil {
		return 0, 0, 0, err
	}
	out, err := r.Alloc(callers * abi.SweepOutPerCall)
	if err != nil {
		return 0, 0, 0, err
	}
	spec := make([]byte, abi.SweepBlobSize-abi.ProgSpecific)
	le.PutUint32(spec[abi.SweepFD-abi.ProgSpecific:], fd)
	le.PutUint64(spec[abi.SweepBuf-abi.ProgSpecific:], buf)
	le.PutUint64(spec[abi.SweepChunk-abi.ProgSpecific:], chunk)
	le.PutUint64(spec[abi.SweepFileSize-abi.ProgSpecific:], size)
	if err := r.Launch(ctx, Launch{
		Kernel: abi.KernelPreadSwp, Grid: grid, Block: block, Granularity: granularity, Ordering: ordering,
		Context: ctxID, Flags: abi.SysFlagBlocking, Iterations: 1, Out: out, Specific: spec, HeapRelocs: []uint32{abi.SweepHeap},
	}); err != nil {
		return 0, 0, 0, err
	}
	b, err := r.Read(out, callers*abi.SweepOutPerCall)
	if err != nil {
		return 0, 0, 0, err
	}
	for c := range callers {
		p := b[c*abi.SweepOutPerCall:]
		bytes += le.Uint64(p)
		failed += le.Uint64(p[8:])
		sum += le.Uint64(p[16:])
	}
	return bytes, failed, sum, nil
}

// Err is a failed call's errno as an error, nil on success.
func (res Result) Err() error {
	if res.Errno == 0 {
		return nil
	}
	return fmt.Errorf("system call failed: %w", res.Errno)
}
