package sim

import (
	"bytes"
	"encoding/binary"
	"math/bits"

	"github.com/sluice-gpu/sluice/api/abi"
)

// maxModules bounds the modules one VM may load (each is a few bytes, but a
// guest must not grow the host's maps without bound).
const maxModules = 4096

// Launch limits of the sim's programs, beyond the ABI's: a grid of at most
// maxGroups work-groups of at most maxGroupItems work-items, and at most
// maxIterations calls per caller.
const (
	maxGroups     = 1 << 20
	maxGroupItems = 1024
	maxIterations = 1 << 16
	maxPaths      = 1 << 16
)

var le = binary.LittleEndian

// execLoadModule loads a module: only abi.ModuleSim, whose image is the text
// abi.SimModuleImage (a trailing NUL allowed), names the built-in programs.
// PTX and cubin are ErrUnsupported, another image ErrBadRecord, a handle in
// use ErrBadHandle, more than maxModules ErrNoMemory.
func execLoadModule(s *Sim, v *simVM, c *abi.Command) abi.ErrorCode {
	if c.Format != abi.ModuleSim {
		return abi.ErrUnsupported
	}
	if _, used := v.mods[c.Handle]; used || c.Handle == 0 {
		return abi.ErrBadHandle
	}
	img, ok := span(v.heap, c.HeapOff, c.Length)
	if !ok {
		return abi.ErrHeapRange
	}
	if !bytes.Equal(bytes.TrimSuffix(img, []byte{0}), []byte(abi.SimModuleImage)) {
		return abi.ErrBadRecord
	}
	if len(v.mods) >= maxModules {
		return abi.ErrNoMemory
	}
	v.mods[c.Handle] = struct{}{}
	h, d := c.Handle, v.dev
	s.moving = func() { d.module(h) }
	return abi.OK
}

// execLaunch validates a LAUNCH and leaves the launch ready to run in
// s.starting, for dispatchEngineLocked.
func execLaunch(s *Sim, v *simVM, c *abi.Command) abi.ErrorCode {
	l, code := prepareLaunch(v, c, s.p.Resident)
	if code == abi.OK {
		s.starting = l
	}
	return code
}

// prepareLaunch copies a LAUNCH's kernel name and argument blob out of the
// heap, relocates the copy and validates it against the program it names.
// A module not loaded is ErrBadHandle; a kernel name that is not one of the
// programs ErrUnsupported; see relocate and checkLaunch for the rest.
func prepareLaunch(v *simVM, c *abi.Command, resident int) (*launch, abi.ErrorCode) {
	if _, ok := v.mods[c.Handle]; !ok {
		return nil, abi.ErrBadHandle
	}
	name, ok := span(v.heap, c.NameOff, uint64(c.NameLen))
	if !ok {
		return nil, abi.ErrHeapRange
	}
	prog := programs[string(name)]
	if prog == nil {
		return nil, abi.ErrUnsupported
	}
	raw, ok := span(v.heap, c.ArgsOff, abi.LaunchBlobSize(c.ArgsLen, c.Relocs))
	if !ok {
		return nil, abi.ErrHeapRange
	}
	raw = bytes.Clone(raw) // the guest may rewrite the heap from now on
	l := &launch{prog: prog, blob: raw[:c.ArgsLen], heap: v.heap, resident: resident}
	if code := l.relocate(raw[(uint64(c.ArgsLen)+7)&^7:], v); code != abi.OK {
		return nil, code
	}
	if code := l.geometry(c); code != abi.OK {
		return nil, code
	}
	if code := l.checkArgs(v); code != abi.OK {
		return nil, code
	}
	return l, prog.check(l)
}

// relocate applies the blob's relocations to the copy. The sim has no
// device addresses: RelocHeap checks the heap offset and leaves it (a heap
// "device address" is the offset itself); RelocSyscall, whose u64 must be 0,
// marks the field as the VM's syscall area (a VM without one:
// ErrUnsupported), and RelocSyscallRing (u64 0 too) as its request ring's
// claim counter, one per VM; RelocBuffer is ErrUnsupported (no program takes a device
// buffer). A relocation outside the args or of an unknown kind is
// ErrBadRecord, a heap offset outside the heap ErrHeapRange.
func (l *launch) relocate(relocs []byte, v *simVM) abi.ErrorCode {
	for i := 0; i+abi.RelocSize <= len(relocs); i += abi.RelocSize {
		off := uint64(le.Uint32(relocs[i:]))
		kind := le.Uint32(relocs[i+4:])
		if off > uint64(len(l.blob)) || uint64(len(l.blob))-off < 8 {
			return abi.ErrBadRecord
		}
		val := le.Uint64(l.blob[off:])
		switch kind {
		case abi.RelocHeap:
			if val >= uint64(len(l.heap)) {
				return abi.ErrHeapRange
			}
		case abi.RelocSyscall:
			if val != 0 {
				return abi.ErrBadRecord
			}
			if v.area == nil {
				return abi.ErrUnsupported
			}
			l.area = v.area
		case abi.RelocSyscallRing:
			if val != 0 {
				return abi.ErrBadRecord
			}
			if v.area == nil {
				return abi.ErrUnsupported
			}
			l.ringCtr = v.ringCtr
		case abi.RelocBuffer:
			return abi.ErrUnsupported
		default:
			return abi.ErrBadRecord
		}
		l.relocs = append(l.relocs, reloc{off: uint32(off), kind: kind})
	}
	return abi.OK
}

// relocated reports whether the u64 at off was relocated with kind.
func (l *launch) relocated(off int, kind uint32) bool {
	for _, r := range l.relocs {
		if r.off == uint32(off) && r.kind == kind {
			return true
		}
	}
	return false
}

// geometry sizes the grid: at most maxGroups work-groups of at most
// maxGroupItems work-items (and no more than are resident at once).
func (l *launch) geometry(c *abi.Command) abi.ErrorCode {
	groups, items := uint64(1), uint64(1)
	for i := range 3 {
		hi, lo := bits.Mul64(groups, uint64(c.Grid[i]))
		if hi != 0 || lo > maxGroups || c.Grid[i] == 0 {
			return abi.ErrBadRecord
		}
		groups = lo
		if hi, items = bits.Mul64(items, uint64(c.Block[i])); hi != 0 {
			return abi.ErrBadRecord
		}
	}
	if items == 0 || items > maxGroupItems || items > uint64(l.resident) {
		return abi.ErrBadRecord
	}
	l.groups, l.items = int(groups), int(items)
	return abi.OK
}
