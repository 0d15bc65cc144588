package abi

import "encoding/binary"

// Record is one 64-byte command record as it sits in a ring. The host copies
// a Record out of shared memory, then decodes the copy.
type Record [RecordSize]byte

// Opcode names a command. Zero is never valid, so a zeroed ring slot fails
// loudly instead of running as a NOP.
type Opcode uint16

// Opcodes of ABI v1.
const (
	OpNop        Opcode = 1
	OpFence      Opcode = 2
	OpThrottle   Opcode = 3
	OpMemset     Opcode = 4
	OpCopy       Opcode = 5
	OpAlloc      Opcode = 6
	OpFree       Opcode = 7
	OpLoadModule Opcode = 8
	OpLaunch     Opcode = 9
	opcodeCount         = 10
)

// Command flags.
const (
	// FlagInterrupt asks the host to signal the channel's vector back to the
	// guest when this record completes.
	FlagInterrupt uint16 = 1 << 0
	validFlags           = FlagInterrupt
)

// Copy directions.
const (
	CopyHostToDevice   uint32 = 1 // heap -> buffer
	CopyDeviceToHost   uint32 = 2 // buffer -> heap
	CopyDeviceToDevice uint32 = 3 // buffer SrcHandle -> buffer Handle
)

// Module formats for LOAD_MODULE. On a GPU the module's device memory
// (globals, constants, code) counts against the VM's quota.
const (
	ModulePTX uint32 = 1 // PTX text, compiled for the GPU by the host
	// ModuleCubin is an ELF cubin for the host's GPU; a fatbin is
	// ErrUnsupported.
	ModuleCubin uint32 = 2
	// ModuleSim (ABI 1.1) names the sim backend's built-in programs: the
	// image is the text "sluice-sim" and the functions are the programs of
	// kernels.go. Other backends refuse it (unsupported).
	ModuleSim uint32 = 3
)

// Relocation kinds in a LAUNCH argument blob.
const (
	RelocBuffer uint32 = 1 // the u64 at the offset is a buffer handle: becomes its device address
	RelocHeap   uint32 = 2 // the u64 at the offset is a heap offset: becomes its device-visible address
	// RelocSyscall (ABI 1.1): the u64 at the offset must be 0 and becomes the
	// device-visible address of the VM's syscall area (Layout.SyscallOff), so
	// that a kernel can make system calls through its slots.
	RelocSyscall uint32 = 3
	// RelocSyscallRing (FeatureSyscallRing): the u64 at the offset must be 0
	// and becomes the device-visible address of the VM's request ring claim
	// counter (a u64 in device memory, sysring.go).
	RelocSyscallRing uint32 = 4
)

// Field offsets within a record. Every record starts with opcode, flags and
// handle; the rest is the opcode's payload, and bytes a payload does not use
// must be zero.
const (
	RecOpcode = 0  // uint16
	RecFlags  = 2  // uint16
	RecHandle = 4  // uint32: buffer (MEMSET, COPY, ALLOC, FREE) or module (LOAD_MODULE, LAUNCH); else zero
	RecArg0   = 8  // first payload word
	RelocSize = 8  // one relocation entry in a LAUNCH blob: u32 arg offset, u32 kind
	MaxRelocs = 64 // relocations per LAUNCH
	MaxHandle = 1 << 20
	maxGrid   = 1 << 31 // LAUNCH grid dimensions are below this
	maxBlock  = 1024    // LAUNCH block dimensions are at most this
)

// Command is a decoded, validated record. Which fields mean something depends
// on Op; the others are zero.
type Command struct {
	Op     Opcode
	Flags  uint16
	Handle uint32 // buffer or module handle, 1..MaxHandle; 0 for NOP, FENCE, THROTTLE

	Value      uint64 // FENCE: value to publish; MEMSET: byte to write
	DurationNs uint64 // THROTTLE
	Size       uint64 // ALLOC
	Dir        uint32 // COPY: CopyHostToDevice, CopyDeviceToHost, CopyDeviceToDevice
	SrcHandle  uint32 // COPY device to device: source buffer
	Offset     uint64 // MEMSET, COPY: offset in the buffer Handle
	HeapOff    uint64 // COPY: heap offset (or source offset, device to device); LOAD_MODULE: image
	Length     uint64 // MEMSET, COPY, LOAD_MODULE

	Format    uint32    // LOAD_MODULE: ModulePTX or ModuleCubin
	Grid      [3]uint32 // LAUNCH
	Block     [3]uint32 // LAUNCH
	SharedMem uint32    // LAUNCH: dynamic shared memory bytes
	NameOff   uint64    // LAUNCH: heap offset of the kernel's name (not NUL terminated)
	NameLen   uint32    // LAUNCH
	ArgsOff   uint64    // LAUNCH: heap offset of the argument blob; relocations follow it, 8-byte aligned
	ArgsLen   uint32    // LAUNCH
	Relocs    uint32    // LAUNCH: number of relocations
}

// opSpec is one row of the opcode table; a missing row (no name) is an
// unknown opcode. Its payload's decoder and encoder are decodeOp's and
// encodeOp's cases.
type opSpec struct {
	name   string
	handle bool // the record's handle field means something; otherwise it must be zero
}

var opTable = [opcodeCount]opSpec{
	OpNop:        {name: "NOP"},
	OpFence:      {name: "FENCE"},
	OpThrottle:   {name: "THROTTLE"},
	OpMemset:     {name: "MEMSET", handle: true},
	OpCopy:       {name: "COPY", handle: true},
	OpAlloc:      {name: "ALLOC", handle: true},
	OpFree:       {name: "FREE", handle: true},
	OpLoadModule: {name: "LOAD_MODULE", handle: true},
	OpLaunch:     {name: "LAUNCH", handle: true},
}

// decodeOp decodes op's payload. A switch of static calls, not a table of
// func values: a call through a func value makes its pointer arguments
// escape, which cost DecodeCommand three allocations a command on the
// mediator's hot path (EncodeCommand as many on the guest's).
func decodeOp(op Opcode, p *payload, c *Command, lim *decodeLimits) ErrorCode {
	switch op {
	case OpNop:
		return OK
	case OpFence:
		return decodeFence(p, c, lim)
	case OpThrottle:
		return decodeThrottle(p, c, lim)
	case OpMemset:
		return decodeMemset(p, c, lim)
	case OpCopy:
		return decodeCopy(p, c, lim)
	case OpAlloc:
		return decodeAlloc(p, c, lim)
	case OpFree:
		return decodeFree(p, c, lim)
	case OpLoadModule:
		return decodeLoadModule(p, c, lim)
	case OpLaunch:
		return decodeLaunch(p, c, lim)
	}
	return ErrBadOpcode
}

// encodeOp encodes c's payload (decodeOp's inverse).
func encodeOp(p *payload, c *Command) {
	switch c.Op {
	case OpFence:
		encodeFence(p, c)
	case OpThrottle:
		encodeThrottle(p, c)
	case OpMemset:
		encodeMemset(p, c)
	case OpCopy:
		encodeCopy(p, c)
	case OpAlloc:
		encodeAlloc(p, c)
	case OpLoadModule:
		encodeLoadModule(p, c)
	case OpLaunch:
		encodeLaunch(p, c)
	}
}

func (o Opcode) String() string {
	if int(o) < len(opTable) && opTable[o].name != "" {
		return opTable[o].name
	}
	return "OP_" + itoa(uint64(o))
}

// Valid reports whether o is an opcode of this ABI version.
func (o Opcode) Valid() bool { return int(o) < len(opTable) && opTable[o].name != "" }

// Opcodes lists the valid opcodes in order.
func Opcodes() []Opcode {
	var ops []Opcode
	for i := range opTable {
		if opTable[i].name != "" {
			ops = append(ops, Opcode(i))
		}
	}
	return ops
}

type decodeLimits struct {
	heapSize uint64
	Limits
}

// DecodeCommand decodes and validates a record copied out of a ring of a
// region laid out as l. It never reads outside rec; heap ranges are checked
// against l, limits against lim. On failure the command is zero and the code
// says why.
func DecodeCommand(rec *Record, l Layout, lim Limits) (Command, ErrorCode) {
	p := payload{rec: rec}
	c := Command{
		Op:     Opcode(p.u16(RecOpcode)),
		Flags:  p.u16(RecFlags),
		Handle: p.u32(RecHandle),
	}
	if !c.Op.Valid() {
		return Command{}, ErrBadOpcode
	}
	if c.Flags&^validFlags != 0 {
		return Command{}, ErrBadRecord
	}
	// A handle field the opcode does not use is a reserved field like any
	// other unused byte: it must be zero.
	if !opTable[c.Op].handle && c.Handle != 0 {
		return Command{}, ErrBadRecord
	}
	dl := decodeLimits{heapSize: l.HeapSize, Limits: lim}
	if code := decodeOp(c.Op, &p, &c, &dl); code != OK {
		return Command{}, code
	}
	// Whatever the payload decoder did not read must be zero, so that later
	// minor versions can give those bytes meaning.
	if !p.restZero() {
		return Command{}, ErrBadRecord
	}
	return c, OK
}

// EncodeCommand writes c into a record (guest side). It does not validate: a
// guest may deliberately encode garbage, and the host must cope.
func EncodeCommand(c Command) Record {
	var rec Record
	p := payload{rec: &rec}
	p.put16(RecOpcode, uint16(c.Op))
	p.put16(RecFlags, c.Flags)
	p.put32(RecHandle, c.Handle)
	encodeOp(&p, &c)
	return rec
}

// payload reads and writes little-endian fields of a record and remembers
// which bytes were read, so that DecodeCommand can insist the rest is zero.
type payload struct {
	rec  *Record
	used uint64 // bit i: byte i was consumed
}

var le = binary.LittleEndian

func (p *payload) mark(off, n int) { p.used |= ((uint64(1) << n) - 1) << off }

func (p *payload) u16(off int) uint16      { p.mark(off, 2); return le.Uint16(p.rec[off:]) }
func (p *payload) u32(off int) uint32      { p.mark(off, 4); return le.Uint32(p.rec[off:]) }
func (p *payload) u64(off int) uint64      { p.mark(off, 8); return le.Uint64(p.rec[off:]) }
func (p *payload) put16(off int, v uint16) { le.PutUint16(p.rec[off:], v) }
func (p *payload) put32(off int, v uint32) { le.PutUint32(p.rec[off:], v) }
func (p *payload) put64(off int, v uint64) { le.PutUint64(p.rec[off:], v) }

// restZero reports whether every byte not consumed is zero, eight bytes
// at a time (the decoder runs for every record, on the mediator's and the
// GPU worker's path to a launch).
func (p *payload) restZero() bool {
	for w := range RecordSize / 8 {
		bits := uint8(p.used >> (8 * w))
		if bits == 0xff {
			continue
		}
		if le.Uint64(p.rec[8*w:])&^byteMask[bits] != 0 {
			return false
		}
	}
	return true
}

// byteMask[b] has byte i all ones where bit i of b is set.
var byteMask = func() (t [256]uint64) {
	for b := range t {
		for i := range 8 {
			if b&(1<<i) != 0 {
				t[b] |= 0xff << (8 * i)
			}
		}
	}
	return t
}()

func validHandle(h uint32) bool { return h != 0 && h <= MaxHandle }

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
