package abi

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// testLayout is the layout commands are decoded against: a 1 MiB region
// whose heap is a little under 1 MiB.
func testLayout(t testing.TB) Layout {
	t.Helper()
	l, err := NewLayout(LayoutConfig{RegionSize: 1 << 20, Channels: 2, RingEntries: 64, SyscallSlots: 64})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var testLimits = Limits{MaxThrottleNs: 1e9, MaxAllocSize: 1 << 30}

func launchCmd(heap uint64) Command {
	return Command{
		Op: OpLaunch, Handle: 3,
		Grid: [3]uint32{maxGrid - 1, 1, 65535}, Block: [3]uint32{maxBlock, 1, 1},
		SharedMem: 48 << 10, NameOff: heap - MaxKernelName, NameLen: MaxKernelName,
		ArgsOff: 0, ArgsLen: MaxArgsLen, Relocs: MaxRelocs,
	}
}

// validCommands holds, for every opcode, commands at the edges of what the
// decoder accepts.
func validCommands(heap uint64) []Command {
	return []Command{
		{Op: OpNop},
		{Op: OpNop, Flags: FlagInterrupt},
		{Op: OpFence, Value: math.MaxUint64},
		{Op: OpFence, Flags: FlagInterrupt, Value: 1},
		{Op: OpThrottle, DurationNs: 0},
		{Op: OpThrottle, DurationNs: testLimits.MaxThrottleNs},
		{Op: OpMemset, Handle: 1, Offset: 0, Length: 0, Value: 0},
		{Op: OpMemset, Handle: MaxHandle, Offset: math.MaxUint64 - 10, Length: 10, Value: 0xff},
		{Op: OpCopy, Handle: 1, Dir: CopyHostToDevice, Offset: 5, HeapOff: 0, Length: heap},
		{Op: OpCopy, Handle: 2, Dir: CopyDeviceToHost, Offset: math.MaxUint64, HeapOff: heap, Length: 0},
		{Op: OpCopy, Handle: 2, Dir: CopyDeviceToHost, Offset: 0, HeapOff: heap - 1, Length: 1},
		{Op: OpCopy, Handle: 2, Dir: CopyDeviceToDevice, SrcHandle: MaxHandle, Offset: 1, HeapOff: math.MaxUint64 - 1, Length: 1},
		{Op: OpCopy, Handle: 2, Dir: CopyDeviceToDevice, SrcHandle: 2, Offset: 0, HeapOff: heap * 4, Length: heap * 4},
		{Op: OpAlloc, Handle: 9, Size: 1},
		{Op: OpAlloc, Handle: MaxHandle, Size: testLimits.MaxAllocSize},
		{Op: OpFree, Handle: 1},
		{Op: OpFree, Flags: FlagInterrupt, Handle: MaxHandle},
		{Op: OpLoadModule, Handle: 4, Format: ModulePTX, HeapOff: 0, Length: heap},
		{Op: OpLoadModule, Handle: 4, Format: ModuleCubin, HeapOff: heap - 1, Length: 1},
		{Op: OpLaunch, Handle: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, NameOff: 0, NameLen: 1, ArgsOff: heap},
		{Op: OpLaunch, Handle: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, NameOff: 0, NameLen: 1, ArgsOff: heap - 8, ArgsLen: 1},
		launchCmd(heap),
	}
}

func TestCommandRoundTrip(t *testing.T) {
	l := testLayout(t)
	seen := make(map[Opcode]bool)
	for _, c := range validCommands(l.HeapSize) {
		seen[c.Op] = true
		rec := EncodeCommand(c)
		got, code := DecodeCommand(&rec, l, testLimits)
		if code != OK {
			t.Errorf("%v %+v: decode failed: %v", c.Op, c, code)
			continue
		}
		if got != c {
			t.Errorf("%v round trip\n got %+v\nwant %+v", c.Op, got, c)
		}
		if again := EncodeCommand(got); again != rec {
			t.Errorf("%v: re-encoding differs\n got % x\nwant % x", c.Op, again, rec)
		}
	}
	for _, op := range Opcodes() {
		if !seen[op] {
			t.Errorf("no round-trip case for %v", op)
		}
	}
}

// TestCommandEveryByteMatters flips every bit of every valid record: the
// decoder must either reject the result or decode a different command. A
// byte it ignored would be one a later version could not give meaning to,
// and a decoding that is not canonical.
func TestCommandEveryByteMatters(t *testing.T) {
	l := testLayout(t)
	for _, c := range validCommands(l.HeapSize) {
		rec := EncodeCommand(c)
		for i := range RecordSize {
			for bit := range 8 {
				m := rec
				m[i] ^= 1 << bit
				got, code := DecodeCommand(&m, l, testLimits)
				if code == OK && got == c {
					t.Errorf("%v: flipping bit %d of byte %d is ignored", c.Op, bit, i)
				}
				if code != OK && got != (Command{}) {
					t.Errorf("%v: rejected command is not zero: %+v", c.Op, got)
				}
			}
		}
	}
}

func TestDecodeCommandRejects(t *testing.T) {
	l := testLayout(t)
	heap := l.HeapSize
	setByte := func(i int, v byte) func(*Record) { return func(r *Record) { r[i] = v } }
	for _, tc := range []struct {
		name string
		cmd  Command
		mod  func(*Record) // applied after encoding, if set
		want ErrorCode
	}{
		{"zero record", Command{}, nil, ErrBadOpcode},
		{"opcode past the table", Command{Op: opcodeCount}, nil, ErrBadOpcode},
		{"opcode max", Command{Op: math.MaxUint16}, nil, ErrBadOpcode},
		{"opcode zero with payload", Command{}, setByte(8, 1), ErrBadOpcode},
		{"unknown flag", Command{Op: OpNop, Flags: 2}, nil, ErrBadRecord},
		{"high flag", Command{Op: OpFence, Flags: FlagInterrupt | 0x8000}, nil, ErrBadRecord},
		{"nop with a handle", Command{Op: OpNop, Handle: 1}, nil, ErrBadRecord},
		{"fence with a handle", Command{Op: OpFence, Handle: 7}, nil, ErrBadRecord},
		{"throttle with a handle", Command{Op: OpThrottle, Handle: MaxHandle + 1}, nil, ErrBadRecord},
		{"nop payload byte", Command{Op: OpNop}, setByte(8, 1), ErrBadRecord},
		{"nop last byte", Command{Op: OpNop}, setByte(63, 0x80), ErrBadRecord},
		{"fence reserved", Command{Op: OpFence, Value: 1}, setByte(16, 1), ErrBadRecord},
		{"throttle too long", Command{Op: OpThrottle, DurationNs: testLimits.MaxThrottleNs + 1}, nil, ErrTooLong},
		{"throttle max", Command{Op: OpThrottle, DurationNs: math.MaxUint64}, nil, ErrTooLong},
		{"throttle reserved", Command{Op: OpThrottle}, setByte(40, 1), ErrBadRecord},

		{"memset no handle", Command{Op: OpMemset, Length: 1}, nil, ErrBadHandle},
		{"memset handle too large", Command{Op: OpMemset, Handle: MaxHandle + 1}, nil, ErrBadHandle},
		{"memset handle max uint32", Command{Op: OpMemset, Handle: math.MaxUint32}, nil, ErrBadHandle},
		{"memset value above a byte", Command{Op: OpMemset, Handle: 1, Value: 0x100}, nil, ErrBadRecord},
		{"memset value high bits", Command{Op: OpMemset, Handle: 1}, setByte(MemsetValue+3, 1), ErrBadRecord},
		{"memset range wraps", Command{Op: OpMemset, Handle: 1, Offset: math.MaxUint64, Length: 1}, nil, ErrBadRecord},
		{"memset reserved", Command{Op: OpMemset, Handle: 1}, setByte(MemsetValue+4, 1), ErrBadRecord},

		{"copy no handle", Command{Op: OpCopy, Dir: CopyHostToDevice}, nil, ErrBadHandle},
		{"copy no direction", Command{Op: OpCopy, Handle: 1}, nil, ErrBadRecord},
		{"copy bad direction", Command{Op: OpCopy, Handle: 1, Dir: 4}, nil, ErrBadRecord},
		{"copy direction max", Command{Op: OpCopy, Handle: 1, Dir: math.MaxUint32}, nil, ErrBadRecord},
		{"copy h2d with source", Command{Op: OpCopy, Handle: 1, Dir: CopyHostToDevice, SrcHandle: 2}, nil, ErrBadRecord},
		{"copy d2h with source", Command{Op: OpCopy, Handle: 1, Dir: CopyDeviceToHost, SrcHandle: 2}, nil, ErrBadRecord},
		{"copy h2d past heap", Command{Op: OpCopy, Handle: 1, Dir: CopyHostToDevice, HeapOff: 1, Length: heap}, nil, ErrHeapRange},
		{"copy d2h heap offset past heap", Command{Op: OpCopy, Handle: 1, Dir: CopyDeviceToHost, HeapOff: heap + 1}, nil, ErrHeapRange},
		{"copy d2h heap range wraps", Command{Op: OpCopy, Handle: 1, Dir: CopyDeviceToHost, HeapOff: 8, Length: math.MaxUint64 - 8}, nil, ErrHeapRange},
		{"copy buffer range wraps", Command{Op: OpCopy, Handle: 1, Dir: CopyHostToDevice, Offset: math.MaxUint64, Length: 2}, nil, ErrBufferRange},
		{"copy d2d no source", Command{Op: OpCopy, Handle: 1, Dir: CopyDeviceToDevice}, nil, ErrBadHandle},
		{"copy d2d source too large", Command{Op: OpCopy, Handle: 1, Dir: CopyDeviceToDevice, SrcHandle: MaxHandle + 1}, nil, ErrBadHandle},
		{"copy d2d source range wraps", Command{Op: OpCopy, Handle: 1, Dir: CopyDeviceToDevice, SrcHandle: 2, HeapOff: math.MaxUint64, Length: 1}, nil, ErrBufferRange},
		{"copy reserved", Command{Op: OpCopy, Handle: 1, Dir: CopyHostToDevice}, setByte(CopyLength+8, 1), ErrBadRecord},
		{"copy last byte", Command{Op: OpCopy, Handle: 1, Dir: CopyHostToDevice}, setByte(63, 1), ErrBadRecord},

		{"alloc no handle", Command{Op: OpAlloc, Size: 1}, nil, ErrBadHandle},
		{"alloc handle too large", Command{Op: OpAlloc, Handle: MaxHandle + 1, Size: 1}, nil, ErrBadHandle},
		{"alloc zero size", Command{Op: OpAlloc, Handle: 1}, nil, ErrBadRecord},
		{"alloc too large", Command{Op: OpAlloc, Handle: 1, Size: testLimits.MaxAllocSize + 1}, nil, ErrNoMemory},
		{"alloc reserved", Command{Op: OpAlloc, Handle: 1, Size: 1}, setByte(16, 1), ErrBadRecord},

		{"free no handle", Command{Op: OpFree}, nil, ErrBadHandle},
		{"free handle too large", Command{Op: OpFree, Handle: MaxHandle + 1}, nil, ErrBadHandle},
		{"free payload", Command{Op: OpFree, Handle: 1}, setByte(RecArg0, 1), ErrBadRecord},

		{"module no handle", Command{Op: OpLoadModule, Format: ModulePTX, Length: 1}, nil, ErrBadHandle},
		{"module no format", Command{Op: OpLoadModule, Handle: 1, Length: 1}, nil, ErrBadRecord},
		{"module bad format", Command{Op: OpLoadModule, Handle: 1, Format: 4, Length: 1}, nil, ErrBadRecord},
		{"module empty", Command{Op: OpLoadModule, Handle: 1, Format: ModulePTX}, nil, ErrHeapRange},
		{"module past heap", Command{Op: OpLoadModule, Handle: 1, Format: ModuleCubin, HeapOff: heap, Length: 1}, nil, ErrHeapRange},
		{"module wraps", Command{Op: OpLoadModule, Handle: 1, Format: ModuleCubin, HeapOff: 16, Length: math.MaxUint64 - 15}, nil, ErrHeapRange},
		{"module padding word", Command{Op: OpLoadModule, Handle: 1, Format: ModulePTX, Length: 1}, setByte(ModFormat+4, 1), ErrBadRecord},
		{"module reserved", Command{Op: OpLoadModule, Handle: 1, Format: ModulePTX, Length: 1}, setByte(ModLength+8, 1), ErrBadRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := EncodeCommand(tc.cmd)
			if tc.mod != nil {
				tc.mod(&rec)
			}
			got, code := DecodeCommand(&rec, l, testLimits)
			if code != tc.want {
				t.Errorf("DecodeCommand(% x) = %v, want %v", rec, code, tc.want)
			}
			if got != (Command{}) {
				t.Errorf("rejected command is not zero: %+v", got)
			}
		})
	}
}

func TestDecodeLaunchRejects(t *testing.T) {
	l := testLayout(t)
	heap := l.HeapSize
	for _, tc := range []struct {
		name string
		mod  func(*Command)
		want ErrorCode
	}{
		{"no handle", func(c *Command) { c.Handle = 0 }, ErrBadHandle},
		{"handle too large", func(c *Command) { c.Handle = MaxHandle + 1 }, ErrBadHandle},
		{"zero grid x", func(c *Command) { c.Grid[0] = 0 }, ErrBadRecord},
		{"zero grid y", func(c *Command) { c.Grid[1] = 0 }, ErrBadRecord},
		{"zero grid z", func(c *Command) { c.Grid[2] = 0 }, ErrBadRecord},
		{"grid 2^31", func(c *Command) { c.Grid[0] = maxGrid }, ErrBadRecord},
		{"grid max", func(c *Command) { c.Grid[2] = math.MaxUint32 }, ErrBadRecord},
		{"zero block x", func(c *Command) { c.Block[0] = 0 }, ErrBadRecord},
		{"zero block z", func(c *Command) { c.Block[2] = 0 }, ErrBadRecord},
		{"block too large", func(c *Command) { c.Block[1] = maxBlock + 1 }, ErrBadRecord},
		{"no name", func(c *Command) { c.NameLen = 0 }, ErrBadRecord},
		{"name too long", func(c *Command) { c.NameLen = MaxKernelName + 1 }, ErrBadRecord},
		{"args too long", func(c *Command) { c.ArgsLen = MaxArgsLen + 1 }, ErrBadRecord},
		{"too many relocations", func(c *Command) { c.Relocs = MaxRelocs + 1 }, ErrBadRecord},
		{"relocations max uint32", func(c *Command) { c.Relocs = math.MaxUint32 }, ErrBadRecord},
		{"name past heap", func(c *Command) { c.NameOff = heap - MaxKernelName + 1 }, ErrHeapRange},
		{"name offset huge", func(c *Command) { c.NameOff = math.MaxUint64 }, ErrHeapRange},
		{"args past heap", func(c *Command) { c.ArgsOff = heap - LaunchBlobSize(MaxArgsLen, MaxRelocs) + 1 }, ErrHeapRange},
		// The padding to 8 counts: 1 byte of args at heap-1 needs 8 bytes.
		{"args padding past heap", func(c *Command) { c.ArgsOff, c.ArgsLen, c.Relocs = heap-1, 1, 0 }, ErrHeapRange},
		{"relocs past heap", func(c *Command) { c.ArgsOff, c.ArgsLen, c.Relocs = heap-8, 0, 2 }, ErrHeapRange},
		{"args offset huge", func(c *Command) { c.ArgsOff = math.MaxUint64 - 7 }, ErrHeapRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := launchCmd(heap)
			tc.mod(&c)
			rec := EncodeCommand(c)
			if got, code := DecodeCommand(&rec, l, testLimits); code != tc.want || got != (Command{}) {
				t.Errorf("DecodeCommand(%+v) = %+v, %v; want %v", c, got, code, tc.want)
			}
		})
	}
}

func TestDecodeCommandAgainstEmptyHeap(t *testing.T) {
	var l Layout // no heap at all: only empty ranges at 0 are inside
	for _, tc := range []struct {
		c    Command
		want ErrorCode
	}{
		{Command{Op: OpCopy, Handle: 1, Dir: CopyHostToDevice}, OK},
		{Command{Op: OpCopy, Handle: 1, Dir: CopyHostToDevice, Length: 1}, ErrHeapRange},
		{Command{Op: OpLoadModule, Handle: 1, Format: ModulePTX, Length: 1}, ErrHeapRange},
		{Command{Op: OpLaunch, Handle: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, NameLen: 1}, ErrHeapRange},
		{Command{Op: OpAlloc, Handle: 1, Size: 1}, ErrNoMemory}, // zero Limits: nothing may be allocated
		{Command{Op: OpThrottle, DurationNs: 1}, ErrTooLong},
		{Command{Op: OpThrottle}, OK},
	} {
		rec := EncodeCommand(tc.c)
		if _, code := DecodeCommand(&rec, l, Limits{}); code != tc.want {
			t.Errorf("DecodeCommand(%+v) over an empty heap = %v, want %v", tc.c, code, tc.want)
		}
	}
}

func TestEncodeCommandLayout(t *testing.T) {
	le := binary.LittleEndian
	rec := EncodeCommand(Command{
		Op: OpCopy, Flags: FlagInterrupt, Handle: 0x01020304, Dir: CopyDeviceToDevice, SrcHandle: 0x0a0b0c0d,
		Offset: 0x1111111111111111, HeapOff: 0x2222222222222222, Length: 0x3333333333333333,
	})
	for _, f := range []struct {
		name      string
		got, want uint64
	}{
		{"opcode", uint64(le.Uint16(rec[RecOpcode:])), uint64(OpCopy)},
		{"flags", uint64(le.Uint16(rec[RecFlags:])), uint64(FlagInterrupt)},
		{"handle", uint64(le.Uint32(rec[RecHandle:])), 0x01020304},
		{"dir", uint64(le.Uint32(rec[CopyDir:])), uint64(CopyDeviceToDevice)},
		{"src handle", uint64(le.Uint32(rec[CopySrcHandle:])), 0x0a0b0c0d},
		{"offset", le.Uint64(rec[CopyOffset:]), 0x1111111111111111},
		{"heap off", le.Uint64(rec[CopyHeapOff:]), 0x2222222222222222},
		{"length", le.Uint64(rec[CopyLength:]), 0x3333333333333333},
	} {
		if f.got != f.want {
			t.Errorf("%s = %#x, want %#x", f.name, f.got, f.want)
		}
	}
	if rec[0] != byte(OpCopy) || rec[1] != 0 {
		t.Errorf("opcode bytes % x: not little-endian", rec[:2])
	}
	// An invalid opcode encodes its common fields and nothing else.
	bad := EncodeCommand(Command{Op: 0x7777, Handle: 5, Value: 9, Size: 9, Length: 9})
	var want Record
	le.PutUint16(want[RecOpcode:], 0x7777)
	le.PutUint32(want[RecHandle:], 5)
	if bad != want {
		t.Errorf("EncodeCommand(invalid op) = % x", bad)
	}
}

func TestOpcodeTable(t *testing.T) {
	ops := Opcodes()
	if len(ops) != opcodeCount-1 {
		t.Errorf("%d opcodes, want %d", len(ops), opcodeCount-1)
	}
	names := make(map[string]Opcode)
	for i, op := range ops {
		if op != Opcode(i+1) {
			t.Errorf("Opcodes()[%d] = %d: want 1.. in order without gaps", i, op)
		}
		s := opTable[op]
		var rec Record
		if code := decodeOp(op, &payload{rec: &rec}, &Command{Op: op}, &decodeLimits{}); s.name == "" || code == ErrBadOpcode {
			t.Errorf("opcode %d: name %q, decodeOp %v (no case for it?)", op, s.name, code)
		}
		if prev, dup := names[s.name]; dup {
			t.Errorf("opcodes %d and %d are both named %q", prev, op, s.name)
		}
		names[s.name] = op
		if !op.Valid() || op.String() != s.name {
			t.Errorf("opcode %d: Valid %v, String %q", op, op.Valid(), op.String())
		}
	}
	// The ops that take a handle are those RecHandle's comment names.
	withHandle := map[Opcode]bool{OpMemset: true, OpCopy: true, OpAlloc: true, OpFree: true, OpLoadModule: true, OpLaunch: true}
	for _, op := range ops {
		if opTable[op].handle != withHandle[op] {
			t.Errorf("%v: handle %v, want %v", op, opTable[op].handle, withHandle[op])
		}
	}
	for _, op := range []Opcode{0, opcodeCount, 0x100, math.MaxUint16} {
		if op.Valid() {
			t.Errorf("opcode %d is valid", op)
		}
	}
	if got := Opcode(0).String(); got != "OP_0" {
		t.Errorf("Opcode(0).String() = %q", got)
	}
	if got := Opcode(math.MaxUint16).String(); got != "OP_65535" {
		t.Errorf("Opcode(65535).String() = %q", got)
	}
	if got := OpLoadModule.String(); got != "LOAD_MODULE" {
		t.Errorf("OpLoadModule.String() = %q", got)
	}
}

func TestLaunchBlobSize(t *testing.T) {
	for _, tc := range []struct {
		args, relocs uint32
		want         uint64
	}{
		{0, 0, 0}, {1, 0, 8}, {8, 0, 8}, {9, 1, 24}, {0, 2, 16},
		{MaxArgsLen, MaxRelocs, MaxArgsLen + MaxRelocs*RelocSize},
		{math.MaxUint32, math.MaxUint32, (1 << 32) + 8*math.MaxUint32}, // no 32-bit overflow
	} {
		if got := LaunchBlobSize(tc.args, tc.relocs); got != tc.want {
			t.Errorf("LaunchBlobSize(%d, %d) = %d, want %d", tc.args, tc.relocs, got, tc.want)
		}
	}
}

// TestCommandCodecAllocatesNothing: encoding and decoding a command are on
// every command's path (the guest's submit, the mediator's forward) and
// allocate nothing (a decoder called through a func value made its pointer
// arguments escape: three allocations each way).
func TestCommandCodecAllocatesNothing(t *testing.T) {
	l, err := NewLayout(LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Command{{Op: OpNop}, {Op: OpThrottle, DurationNs: 1000}, {Op: OpFence, Value: 7}} {
		var rec Record
		if n := testing.AllocsPerRun(100, func() { rec = EncodeCommand(c) }); n != 0 {
			t.Errorf("EncodeCommand(%v): %v allocations", c.Op, n)
		}
		if n := testing.AllocsPerRun(100, func() { DecodeCommand(&rec, l, DefaultLimits()) }); n != 0 {
			t.Errorf("DecodeCommand(%v): %v allocations", c.Op, n)
		}
		if got, code := DecodeCommand(&rec, l, DefaultLimits()); code != OK || got.Op != c.Op {
			t.Errorf("%v: decoded %+v, %v", c.Op, got, code)
		}
	}
}

// TestRestZeroEveryByte: a non-zero byte that the decoder did not consume
// fails the record, wherever it lies; one it consumed does not.
func TestRestZeroEveryByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var rec Record
		p := payload{rec: &rec, used: rng.Uint64()}
		if !p.restZero() {
			t.Fatalf("used %#x: a zero record fails", p.used)
		}
		i := rng.IntN(RecordSize)
		rec[i] = byte(1 + rng.IntN(255))
		consumed := p.used&(1<<i) != 0
		if p.restZero() != consumed {
			t.Fatalf("used %#x, byte %d = %#x: restZero %v, want %v", p.used, i, rec[i], !consumed, consumed)
		}
	}
}

// BenchmarkDecodeThrottle is the decoder's cost for one THROTTLE record,
// which the mediator and the GPU worker each pay per command.
func BenchmarkDecodeThrottle(b *testing.B) {
	l, err := NewLayout(LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 64})
	if err != nil {
		b.Fatal(err)
	}
	rec := EncodeCommand(Command{Op: OpThrottle, DurationNs: 10_000})
	lim := DefaultLimits()
	for range b.N {
		if _, code := DecodeCommand(&rec, l, lim); code != OK {
			b.Fatal(code)
		}
	}
}
