package abi

// Payload layouts, one pair of functions per opcode. Offsets are relative to
// the record; the C header's per-opcode structs mirror them.

// FENCE: u64 value at 8.
const FenceValue = 8

func decodeFence(p *payload, c *Command, _ *decodeLimits) ErrorCode {
	c.Value = p.u64(FenceValue)
	return OK
}

func encodeFence(p *payload, c *Command) { p.put64(FenceValue, c.Value) }

// THROTTLE: u64 duration in nanoseconds at 8.
const ThrottleNs = 8

func decodeThrottle(p *payload, c *Command, lim *decodeLimits) ErrorCode {
	c.DurationNs = p.u64(ThrottleNs)
	if c.DurationNs > lim.MaxThrottleNs {
		return ErrTooLong
	}
	return OK
}

func encodeThrottle(p *payload, c *Command) { p.put64(ThrottleNs, c.DurationNs) }

// MEMSET: handle; u64 offset at 8, u64 length at 16, u32 byte value at 24.
const (
	MemsetOffset = 8
	MemsetLength = 16
	MemsetValue  = 24
)

func decodeMemset(p *payload, c *Command, _ *decodeLimits) ErrorCode {
	c.Offset = p.u64(MemsetOffset)
	c.Length = p.u64(MemsetLength)
	c.Value = uint64(p.u32(MemsetValue))
	if !validHandle(c.Handle) {
		return ErrBadHandle
	}
	if c.Value > 0xff || c.Offset+c.Length < c.Offset {
		return ErrBadRecord
	}
	return OK
}

func encodeMemset(p *payload, c *Command) {
	p.put64(MemsetOffset, c.Offset)
	p.put64(MemsetLength, c.Length)
	p.put32(MemsetValue, uint32(c.Value))
}

// COPY: handle (destination buffer, or the buffer read for device to host);
// u32 direction at 8, u32 source handle at 12 (device to device only),
// u64 buffer offset at 16, u64 heap offset (source buffer offset for device
// to device) at 24, u64 length at 32.
const (
	CopyDir       = 8
	CopySrcHandle = 12
	CopyOffset    = 16
	CopyHeapOff   = 24
	CopyLength    = 32
)

func decodeCopy(p *payload, c *Command, lim *decodeLimits) ErrorCode {
	c.Dir = p.u32(CopyDir)
	c.SrcHandle = p.u32(CopySrcHandle)
	c.Offset = p.u64(CopyOffset)
	c.HeapOff = p.u64(CopyHeapOff)
	c.Length = p.u64(CopyLength)
	if !validHandle(c.Handle) {
		return ErrBadHandle
	}
	if c.Offset+c.Length < c.Offset {
		return ErrBufferRange
	}
	switch c.Dir {
	case CopyHostToDevice, CopyDeviceToHost:
		if c.SrcHandle != 0 {
			return ErrBadRecord
		}
		if !(Layout{HeapSize: lim.heapSize}).HeapRange(c.HeapOff, c.Length) {
			return ErrHeapRange
		}
	case CopyDeviceToDevice:
		if !validHandle(c.SrcHandle) {
			return ErrBadHandle
		}
		if c.HeapOff+c.Length < c.HeapOff {
			return ErrBufferRange
		}
	default:
		return ErrBadRecord
	}
	return OK
}

func encodeCopy(p *payload, c *Command) {
	p.put32(CopyDir, c.Dir)
	p.put32(CopySrcHandle, c.SrcHandle)
	p.put64(CopyOffset, c.Offset)
	p.put64(CopyHeapOff, c.HeapOff)
	p.put64(CopyLength, c.Length)
}

// ALLOC: handle (chosen by the guest); u64 size at 8.
const AllocSize = 8

func decodeAlloc(p *payload, c *Command, lim *decodeLimits) ErrorCode {
	c.Size = p.u64(AllocSize)
	if !validHandle(c.Handle) {
		return ErrBadHandle
	}
	if c.Size == 0 {
		return ErrBadRecord
	}
	if c.Size > lim.MaxAllocSize {
		return ErrNoMemory
	}
	return OK
}

func encodeAlloc(p *payload, c *Command) { p.put64(AllocSize, c.Size) }

// FREE: handle.
func decodeFree(_ *payload, c *Command, _ *decodeLimits) ErrorCode {
	if !validHandle(c.Handle) {
		return ErrBadHandle
	}
	return OK
}

// LOAD_MODULE: handle (module, chosen by the guest); u32 format at 8,
// u64 heap offset at 16, u64 length at 24.
const (
	ModFormat  = 8
	ModHeapOff = 16
	ModLength  = 24
)

func decodeLoadModule(p *payload, c *Command, lim *decodeLimits) ErrorCode {
	c.Format = p.u32(ModFormat)
	c.HeapOff = p.u64(ModHeapOff)
	c.Length = p.u64(ModLength)
	if !validHandle(c.Handle) {
		return ErrBadHandle
	}
	if c.Format != ModulePTX && c.Format != ModuleCubin && c.Format != ModuleSim {
		return ErrBadRecord
	}
	if c.Length == 0 || !(Layout{HeapSize: lim.heapSize}).HeapRange(c.HeapOff, c.Length) {
		return ErrHeapRange
	}
	return OK
}

func encodeLoadModule(p *payload, c *Command) {
	p.put32(ModFormat, c.Format)
	p.put64(ModHeapOff, c.HeapOff)
	p.put64(ModLength, c.Length)
}

// LAUNCH: handle (module); u32 grid[3] at 8, u32 block[3] at 20, u32 shared
// memory at 32, u32 name length at 36, u64 name heap offset at 40, u64 args
// heap offset at 48, u32 args length at 56, u32 relocation count at 60. The
// relocations (RelocSize each) follow the args, 8-byte aligned.
const (
	LaunchGrid      = 8
	LaunchBlock     = 20
	LaunchSharedMem = 32
	LaunchNameLen   = 36
	LaunchNameOff   = 40
	LaunchArgsOff   = 48
	LaunchArgsLen   = 56
	LaunchRelocs    = 60
	MaxKernelName   = 1024
	MaxArgsLen      = 4096
)

func decodeLaunch(p *payload, c *Command, lim *decodeLimits) ErrorCode {
	for i := range 3 {
		c.Grid[i] = p.u32(LaunchGrid + 4*i)
		c.Block[i] = p.u32(LaunchBlock + 4*i)
	}
	c.SharedMem = p.u32(LaunchSharedMem)
	c.NameLen = p.u32(LaunchNameLen)
	c.NameOff = p.u64(LaunchNameOff)
	c.ArgsOff = p.u64(LaunchArgsOff)
	c.ArgsLen = p.u32(LaunchArgsLen)
	c.Relocs = p.u32(LaunchRelocs)
	if !validHandle(c.Handle) {
		return ErrBadHandle
	}
	for i := range 3 {
		if c.Grid[i] == 0 || c.Grid[i] >= maxGrid || c.Block[i] == 0 || c.Block[i] > maxBlock {
			return ErrBadRecord
		}
	}
	if c.NameLen == 0 || c.NameLen > MaxKernelName || c.ArgsLen > MaxArgsLen || c.Relocs > MaxRelocs {
		return ErrBadRecord
	}
	heap := Layout{HeapSize: lim.heapSize}
	if !heap.HeapRange(c.NameOff, uint64(c.NameLen)) || !heap.HeapRange(c.ArgsOff, LaunchBlobSize(c.ArgsLen, c.Relocs)) {
		return ErrHeapRange
	}
	return OK
}

// LaunchBlobSize is the heap bytes a LAUNCH's argument blob spans: the args,
// padded to 8, then the relocations.
func LaunchBlobSize(argsLen, relocs uint32) uint64 {
	return (uint64(argsLen)+7)&^7 + uint64(relocs)*RelocSize
}

func encodeLaunch(p *payload, c *Command) {
	for i := range 3 {
		p.put32(LaunchGrid+4*i, c.Grid[i])
		p.put32(LaunchBlock+4*i, c.Block[i])
	}
	p.put32(LaunchSharedMem, c.SharedMem)
	p.put32(LaunchNameLen, c.NameLen)
	p.put64(LaunchNameOff, c.NameOff)
	p.put64(LaunchArgsOff, c.ArgsOff)
	p.put32(LaunchArgsLen, c.ArgsLen)
	p.put32(LaunchRelocs, c.Relocs)
}
