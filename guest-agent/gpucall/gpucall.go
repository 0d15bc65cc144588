// Package gpucall runs the GPU programs that make system calls (ABI 1.1,
// api/abi/kernels.go) from a guest: it loads their module (the sim backend's
// built-in programs, or the PTX of guest-agent/kernels on an NVIDIA GPU),
// lays out their arguments in the VM's heap, launches them through a channel
// like any other kernel, and reads back what they wrote. Every call they
// make goes through the VM's syscall slots, the mediator and the VM's proxy:
// nothing here talks to the host directly.
//
// A Runner owns the heap from HeapBase upwards while it runs (a bump
// allocator reset by each program): one Runner per VM at a time.
package gpucall

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/kernels"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
)

// Backends a Runner can load programs for.
const (
	BackendSim  = "sim"
	BackendCUDA = "cuda"
)

// moduleHandle is the handle the Runner loads its module under.
const moduleHandle = 0xfca11

// ErrNoSyscalls means the VM's mediator serves no syscall area.
var ErrNoSyscalls = errors.New("the host serves no GPU system calls for this VM (FeatureSyscalls is off)")

// Runner launches syscall programs on one channel.
type Runner struct {
	dev  *sdk.Device
	ch   *sdk.Channel
	base uint64 // heap offset where the Runner's allocations start
	next uint64
}

// Options tunes NewRunner.
type Options struct {
	Backend  string // BackendSim (default) or BackendCUDA
	Channel  int    // the channel programs run on (default 0)
	HeapBase uint64 // first heap byte the Runner may use (default 0)
}

// NewRunner loads the programs' module on the device.
func NewRunner(ctx context.Context, dev *sdk.Device, o Options) (*Runner, error) {
	if dev.Header().Features&abi.FeatureSyscalls == 0 || dev.Layout().SyscallSlots == 0 {
		return nil, ErrNoSyscalls
	}
	ch, err := dev.Channel(o.Channel)
	if err != nil {
		return nil, err
	}
	r := &Runner{dev: dev, ch: ch, base: o.HeapBase, next: o.HeapBase}
	format, image := abi.ModuleSim, []byte(abi.SimModuleImage)
	switch o.Backend {
	case "", BackendSim:
	case BackendCUDA:
		format, image = abi.ModulePTX, append(append([]byte(nil), kernels.PTX...), 0)
	default:
		return nil, fmt.Errorf("backend %q: want %s or %s", o.Backend, BackendSim, BackendCUDA)
	}
	off, err := r.put(image)
	if err != nil {
		return nil, err
	}
	err = r.run(ctx, abi.Command{Op: abi.OpLoadModule, Handle: moduleHandle, Format: format, HeapOff: off, Length: uint64(len(image))})
	if errors.Is(err, abi.ErrBadHandle) {
		// An earlier run loaded the programs under this handle (modules
		// live as long as the VM's context): use them.
		err = ch.Reset(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("loading the syscall programs: %w", err)
	}
	r.base = r.next // the module image stays
	return r, nil
}

// Slots is the VM's syscall slot count.
func (r *Runner) Slots() int { return int(r.dev.Layout().SyscallSlots) }

// Ring reports whether the host reads the syscall area's request ring
// (abi.FeatureSyscallRing), so that programs may call through it.
func (r *Runner) Ring() bool { return r.dev.Header().Features&abi.FeatureSyscallRing != 0 }

// run submits cmds and waits for the last.
func (r *Runner) run(ctx context.Context, cmds ...abi.Command) error {
	idx, err := r.ch.Submit(ctx, cmds...)
	if err != nil {
		return err
	}
	return r.ch.Wait(ctx, idx)
}

// alloc reserves n heap bytes, 64-byte aligned.
func (r *Runner) alloc(n uint64) (uint64, error) {
	off := (r.next + 63) &^ 63
	if !r.dev.Layout().HeapRange(off, n) {
		return 0, fmt.Errorf("the program needs %d heap bytes at %d; the heap has %d: %w", n, off, r.dev.Layout().HeapSize, sdk.ErrRange)
	}
	r.next = off + n
	return off, nil
}

// put copies b into a fresh allocation.
func (r *Runner) put(b []byte) (uint64, error) {
	off, err := r.alloc(uint64(len(b)))
	if err != nil {
		return 0, err
	}
	return off, r.dev.WriteHeap(off, b)
}

// PutString places s, NUL-terminated, in the heap (a path argument).
func (r *Runner) PutString(s string) (uint64, error) { return r.put(append([]byte(s), 0)) }

// Alloc reserves n zeroed heap bytes (a buffer argument).
func (r *Runner) Alloc(n uint64) (uint64, error) {
	off, err := r.alloc(n)
	if err != nil {
		return 0, err
	}
	return off, r.dev.WriteHeap(off, make([]byte, n))
}

// Read copies n heap bytes at off.
func (r *Runner) Read(off, n uint64) ([]byte, error) {
	b := make([]byte, n)
	return b, r.dev.ReadHeap(off, b)
}

// Reset frees every allocation made since the module was loaded.
func (r *Runner) Reset() { r.next = r.base }

// Launch describes one program launch.
type Launch struct {
	Kernel      string
	Grid, Block uint32 // 1-D
	Granularity uint8  // abi.ProgWorkItem, ProgWorkGroup, ProgKernel
	Ordering    uint8  // abi.ProgStrong, ProgRelaxed
	Context     uint8
	Flags       uint8
	Iterations  uint32
	FirstSlot   uint32
	Slots       uint32 // 0: every slot from FirstSlot
	// OwnSlots promises that nothing else (another launch, another process
	// of the guest) uses [FirstSlot, FirstSlot+Slots) while this launch
	// runs: callers that do not outnumber the slots then own theirs
	// (abi.ProgOwnSlots: no lock, no state read at each claim, ~2.5 µs less
	// a call on an H200). Off by default: two launches sharing slots without
	// the lock could lose calls, and a Runner cannot see other processes'.
	OwnSlots   bool
	Out        uint64 // heap offset of the program's results
	Specific   []byte // the blob from abi.ProgSpecific on
	HeapRelocs []uint32
	RingRelocs []uint32 // fields relocated to the request ring's claim counter (abi.RelocSyscallRing)
}

// callers is how many callers the launch has, by granularity (at most: a
// program may make fewer).
func (l *Launch) callers() uint64 {
	switch l.Granularity {
	case abi.ProgWorkItem:
		return uint64(l.Grid) * uint64(l.Block)
	case abi.ProgWorkGroup:
		return uint64(l.Grid)
	}
	return 1
}

// Launch runs a program and waits for it.
func (r *Runner) Launch(ctx context.Context, l Launch) error {
	if l.Slots == 0 {
		l.Slots = uint32(r.Slots()) - l.FirstSlot
	}
	le := binary.LittleEndian
	blob := make([]byte, abi.ProgArgsBaseSize, abi.ProgArgsBaseSize+len(l.Specific))
	le.PutUint64(blob[abi.ProgOut:], l.Out)
	le.PutUint32(blob[abi.ProgFirstSlot:], l.FirstSlot)
	le.PutUint32(blob[abi.ProgSlots:], l.Slots)
	blob[abi.ProgGranularity], blob[abi.ProgOrdering] = l.Granularity, l.Ordering
	if l.OwnSlots && l.callers() <= uint64(l.Slots) {
		blob[abi.ProgOrdering] |= abi.ProgOwnSlots
	}
	blob[abi.ProgContext], blob[abi.ProgFlags] = l.Context, l.Flags
	le.PutUint32(blob[abi.ProgIterations:], l.Iterations)
	blob = append(blob, l.Specific...)
	argsLen := uint32(len(blob))
	for len(blob)%8 != 0 {
		blob = append(blob, 0)
	}
	relocs := [][2]uint32{{abi.ProgSys, abi.RelocSyscall}, {abi.ProgOut, abi.RelocHeap}}
	for _, off := range l.HeapRelocs {
		relocs = append(relocs, [2]uint32{off, abi.RelocHeap})
	}
	for _, off := range l.RingRelocs {
		relocs = append(relocs, [2]uint32{off, abi.RelocSyscallRing})
	}
	for _, rl := range relocs {
		blob = le.AppendUint32(blob, rl[0])
		blob = le.AppendUint32(blob, rl[1])
	}
	argsOff, err := r.put(blob)
	if err != nil {
		return err
	}
	nameOff, err := r.put([]byte(l.Kernel))
	if err != nil {
		return err
	}
	cmd := abi.Command{
		Op: abi.OpLaunch, Handle: moduleHandle,
		Grid: [3]uint32{l.Grid, 1, 1}, Block: [3]uint32{l.Block, 1, 1},
		NameOff: nameOff, NameLen: uint32(len(l.Kernel)),
		ArgsOff: argsOff, ArgsLen: argsLen, Relocs: uint32(len(relocs)),
	}
	idx, err := r.ch.Submit(ctx, cmd)
	if err != nil {
		return err
	}
	// Programs make calls without ringing; one ring starts the mediator's
	// spinning poller at once instead of at its next idle scan.
	_ = r.dev.Doorbell(abi.SyscallVector(int(r.dev.Layout().Channels)))
	if err := r.ch.Wait(ctx, idx); err != nil {
		return fmt.Errorf("running %s: %w", l.Kernel, err)
	}
	return nil
}
