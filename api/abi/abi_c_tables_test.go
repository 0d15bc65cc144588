package abi

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"testing"
)

// The tables abi_c_test.go checks: every constant, struct member and
// helper of include/sluice_abi.h with the value the Go side gives it.

// cCheck is one C expression and the value the Go side says it has: an
// integer, or a string for a macro that expands to a string literal.
type cCheck struct {
	expr string
	want any
}

// wantText is the value as the C program prints it, and whether it is a
// string.
func (c cCheck) wantText() (string, bool) {
	v := reflect.ValueOf(c.want)
	switch {
	case v.Kind() == reflect.String:
		return v.String(), true
	case v.CanUint():
		return strconv.FormatUint(v.Uint(), 10), false
	case v.CanInt() && v.Int() >= 0:
		return strconv.FormatInt(v.Int(), 10), false
	}
	panic(fmt.Sprintf("check %s: want %v (%T) is neither a string nor a non-negative integer", c.expr, c.want, c.want))
}

func u[T ~uint8 | ~uint16 | ~uint32 | ~uint64](v T) uint64 { return uint64(v) }

// cConstChecks pairs every macro of the header with its Go constant. Every
// exported constant of the package must be named in this function
// (TestCTablesCoverGo parses it to check).
func cConstChecks() []cCheck {
	return []cCheck{
		{"SLUICE_MAGIC", u(Magic)},
		{"SLUICE_VERSION_MAJOR", VersionMajor},
		{"SLUICE_VERSION_MINOR", VersionMinor},
		{"SLUICE_PAGE_SIZE", PageSize},
		{"SLUICE_HEADER_SIZE", HeaderSize},
		{"SLUICE_CHANNEL_DESC_SIZE", ChannelDescSize},
		{"SLUICE_RECORD_SIZE", RecordSize},
		{"SLUICE_SYSCALL_SLOT_SIZE", SyscallSlotSize},
		{"SLUICE_RELOC_SIZE", RelocSize},
		{"SLUICE_MAX_CHANNELS", MaxChannels},
		{"SLUICE_MIN_RING_ENTRIES", MinRingEntries},
		{"SLUICE_MAX_RING_ENTRIES", MaxRingEntries},
		{"SLUICE_MAX_SYSCALL_SLOTS", MaxSyscallSlots},
		{"SLUICE_MIN_REGION_SIZE", MinRegionSize},
		{"SLUICE_MAX_REGION_SIZE", MaxRegionSize},
		{"SLUICE_MAX_HANDLE", MaxHandle},
		{"SLUICE_MAX_RELOCS", MaxRelocs},
		{"SLUICE_MAX_KERNEL_NAME", MaxKernelName},
		{"SLUICE_MAX_ARGS_LEN", MaxArgsLen},
		{"SLUICE_MAX_GRID", maxGrid - 1},
		{"SLUICE_MAX_BLOCK", maxBlock},
		// ivshmem's BAR0 doorbell register (notes/qemu-ivshmem-facts.md);
		// the host side never writes it, so Go has no constant for it.
		{"SLUICE_IVSHMEM_DOORBELL", 12},

		{"SLUICE_FEATURE_SYSCALLS", FeatureSyscalls},
		{"SLUICE_FEATURE_READY_MAP", FeatureReadyMap},
		{"SLUICE_FEATURE_RESULT_WORD", FeatureResultWord},
		{"SLUICE_FEATURE_SYSCALL_RING", FeatureSyscallRing},
		{"SLUICE_FEATURE_WAKE", FeatureWake},
		{"SLUICE_FEATURE_POLLING", FeaturePolling},
		{"SLUICE_HDR_MAGIC", HdrMagic},
		{"SLUICE_HDR_VERSION_MAJOR", HdrVersionMajor},
		{"SLUICE_HDR_VERSION_MINOR", HdrVersionMinor},
		{"SLUICE_HDR_FEATURES", HdrFeatures},
		{"SLUICE_HDR_HOST_PEER_ID", HdrHostPeerID},
		{"SLUICE_HDR_CHANNELS", HdrChannels},
		{"SLUICE_HDR_RING_ENTRIES", HdrRingEntries},
		{"SLUICE_HDR_SYSCALL_SLOTS", HdrSyscallSlots},
		{"SLUICE_HDR_POLLING", HdrPolling},
		{"SLUICE_HDR_REGION_SIZE", HdrRegionSize},
		{"SLUICE_HDR_CHANNELS_OFF", HdrChannelsOff},
		{"SLUICE_HDR_RINGS_OFF", HdrRingsOff},
		{"SLUICE_HDR_SYSCALL_OFF", HdrSyscallOff},
		{"SLUICE_HDR_SYSCALL_SIZE", HdrSyscallSize},
		{"SLUICE_HDR_HEAP_OFF", HdrHeapOff},
		{"SLUICE_HDR_HEAP_SIZE", HdrHeapSize},
		{"SLUICE_HDR_EPOCH", HdrEpoch},
		{"SLUICE_HDR_HEARTBEAT", HdrHeartbeat},
		{"SLUICE_HDR_SYSCALL_VECTOR", HdrSyscallVector},
		{"SLUICE_HDR_CONTROL_VECTOR", HdrControlVector},
		{"SLUICE_HDR_MAX_THROTTLE_NS", HdrMaxThrottleNs},
		{"SLUICE_HDR_MAX_ALLOC_SIZE", HdrMaxAllocSize},

		{"SLUICE_CH_PUT", ChPut},
		{"SLUICE_CH_RESET", ChReset},
		{"SLUICE_CH_WAKE", ChWake},
		{"SLUICE_WAKE_ARMED", WakeArmed},
		{"SLUICE_WAKE_PEER_MASK", WakePeerMask},
		{"SLUICE_WAKE_INDEX_SHIFT", WakeIndexShift},
		{"SLUICE_CH_GET", ChGet},
		{"SLUICE_CH_ERROR", ChError},
		{"SLUICE_CH_ERROR_INDEX", ChErrorIndex},
		{"SLUICE_CH_RESET_ACK", ChResetAck},
		{"SLUICE_CH_FENCE", ChFence},
		{"SLUICE_CH_COMPLETED", ChCompleted},
		{"SLUICE_CH_STATE", ChState},
		{"SLUICE_CHANNEL_IDLE", u(ChannelIdle)},
		{"SLUICE_CHANNEL_BUSY", u(ChannelBusy)},
		{"SLUICE_CHANNEL_HELD", u(ChannelHeld)},
		{"SLUICE_CHANNEL_FAILED", u(ChannelFailed)},

		{"SLUICE_OK", u(OK)},
		{"SLUICE_EBADOPCODE", u(ErrBadOpcode)},
		{"SLUICE_EBADRECORD", u(ErrBadRecord)},
		{"SLUICE_ERINGOVERFLOW", u(ErrRingOverflow)},
		{"SLUICE_EHEAPRANGE", u(ErrHeapRange)},
		{"SLUICE_EBADHANDLE", u(ErrBadHandle)},
		{"SLUICE_ENOMEMORY", u(ErrNoMemory)},
		{"SLUICE_EUNSUPPORTED", u(ErrUnsupported)},
		{"SLUICE_EDEVICE", u(ErrDevice)},
		{"SLUICE_EBUFFERRANGE", u(ErrBufferRange)},
		{"SLUICE_ETOOLONG", u(ErrTooLong)},
		{"SLUICE_ESHUTDOWN", u(ErrShutdown)},
		{"SLUICE_ETIMEDOUT", u(ErrTimedOut)},

		{"SLUICE_OP_NOP", u(OpNop)},
		{"SLUICE_OP_FENCE", u(OpFence)},
		{"SLUICE_OP_THROTTLE", u(OpThrottle)},
		{"SLUICE_OP_MEMSET", u(OpMemset)},
		{"SLUICE_OP_COPY", u(OpCopy)},
		{"SLUICE_OP_ALLOC", u(OpAlloc)},
		{"SLUICE_OP_FREE", u(OpFree)},
		{"SLUICE_OP_LOAD_MODULE", u(OpLoadModule)},
		{"SLUICE_OP_LAUNCH", u(OpLaunch)},
		{"SLUICE_FLAG_INTERRUPT", u(FlagInterrupt)},
		{"SLUICE_COPY_HOST_TO_DEVICE", u(CopyHostToDevice)},
		{"SLUICE_COPY_DEVICE_TO_HOST", u(CopyDeviceToHost)},
		{"SLUICE_COPY_DEVICE_TO_DEVICE", u(CopyDeviceToDevice)},
		{"SLUICE_MODULE_PTX", u(ModulePTX)},
		{"SLUICE_MODULE_CUBIN", u(ModuleCubin)},
		{"SLUICE_MODULE_SIM", u(ModuleSim)},
		{"SLUICE_RELOC_BUFFER", u(RelocBuffer)},
		{"SLUICE_RELOC_HEAP", u(RelocHeap)},
		{"SLUICE_RELOC_SYSCALL", u(RelocSyscall)},
		{"SLUICE_RELOC_SYSCALL_RING", u(RelocSyscallRing)},

		{"SLUICE_REC_OPCODE", RecOpcode},
		{"SLUICE_REC_FLAGS", RecFlags},
		{"SLUICE_REC_HANDLE", RecHandle},
		{"SLUICE_REC_ARG0", RecArg0},
		{"SLUICE_FENCE_VALUE", FenceValue},
		{"SLUICE_THROTTLE_NS", ThrottleNs},
		{"SLUICE_MEMSET_OFFSET", MemsetOffset},
		{"SLUICE_MEMSET_LENGTH", MemsetLength},
		{"SLUICE_MEMSET_VALUE", MemsetValue},
		{"SLUICE_COPY_DIR", CopyDir},
		{"SLUICE_COPY_SRC_HANDLE", CopySrcHandle},
		{"SLUICE_COPY_OFFSET", CopyOffset},
		{"SLUICE_COPY_HEAP_OFF", CopyHeapOff},
		{"SLUICE_COPY_LENGTH", CopyLength},
		{"SLUICE_ALLOC_SIZE", AllocSize},
		{"SLUICE_MOD_FORMAT", ModFormat},
		{"SLUICE_MOD_HEAP_OFF", ModHeapOff},
		{"SLUICE_MOD_LENGTH", ModLength},
		{"SLUICE_LAUNCH_GRID", LaunchGrid},
		{"SLUICE_LAUNCH_BLOCK", LaunchBlock},
		{"SLUICE_LAUNCH_SHARED_MEM", LaunchSharedMem},
		{"SLUICE_LAUNCH_NAME_LEN", LaunchNameLen},
		{"SLUICE_LAUNCH_NAME_OFF", LaunchNameOff},
		{"SLUICE_LAUNCH_ARGS_OFF", LaunchArgsOff},
		{"SLUICE_LAUNCH_ARGS_LEN", LaunchArgsLen},
		{"SLUICE_LAUNCH_RELOCS", LaunchRelocs},

		{"SLUICE_SYSCALL_BITMAP_OFF", SyscallBitmapOff},
		{"SLUICE_SYSCALL_READY_MAP_OFF", SyscallReadyMapOff},
		{"SLUICE_SYSCALL_SLOTS_OFF", SyscallSlotsOff},
		{"SLUICE_SYSCALL_RING_ENTRY_SIZE", SyscallRingEntrySize},
		{"SLUICE_SYSCALL_RING_HOLE_NS", SyscallRingHoleNs},
		{"SLUICE_RING_TAG", RingTag},
		{"SLUICE_RING_NUMBER", RingNumber},
		{"SLUICE_RING_FLAGS", RingFlags},
		{"SLUICE_RING_CONTEXT", RingContext},
		{"SLUICE_RING_ARGS", RingArgs},
		{"SLUICE_RING_SLOT", RingSlot},
		{"SLUICE_RING_SEQ", RingSeq},
		{"SLUICE_SYS_STATE", SysState},
		{"SLUICE_SYS_NUMBER", SysNumber},
		{"SLUICE_SYS_FLAGS", SysFlags},
		{"SLUICE_SYS_CONTEXT", SysContext},
		{"SLUICE_SYS_ARGS", SysArgs},
		{"SLUICE_SYS_RET", SysRet},
		{"SLUICE_SYS_ERRNO", SysErrno},
		{"SLUICE_SYS_FIN_ERRNO", SysFinErrno},
		{"SLUICE_SYS_COOKIE", SysCookie},
		{"SLUICE_SYS_ARG_COUNT", SysArgCount},
		{"SLUICE_SYS_FLAG_BLOCKING", u(SysFlagBlocking)},
		{"SLUICE_SYS_FLAG_FASTCALL", u(SysFlagFastcall)},
		{"SLUICE_MAX_CONTEXTS", MaxContexts},
		{"SLUICE_SLOT_STATE_BITS", SlotStateBits},
		{"SLUICE_SLOT_STATE_MASK", SlotStateMask},
		{"SLUICE_SLOT_SEQ_SHIFT", SlotSeqShift},
		{"SLUICE_SLOT_SEQ_MASK", SlotSeqMask},
		{"SLUICE_SLOT_FREE", u(SlotFree)},
		{"SLUICE_SLOT_POPULATING", u(SlotPopulating)},
		{"SLUICE_SLOT_READY", u(SlotReady)},
		{"SLUICE_SLOT_PROCESSING", u(SlotProcessing)},
		{"SLUICE_SLOT_FINISHED", u(SlotFinished)},

		{"SLUICE_SYS_READ", u(SysRead)},
		{"SLUICE_SYS_WRITE", u(SysWrite)},
		{"SLUICE_SYS_CLOSE", u(SysClose)},
		{"SLUICE_SYS_FSTAT", u(SysFstat)},
		{"SLUICE_SYS_LSEEK", u(SysLseek)},
		{"SLUICE_SYS_MMAP", u(SysMmap)},
		{"SLUICE_SYS_MUNMAP", u(SysMunmap)},
		{"SLUICE_SYS_PREAD64", u(SysPread64)},
		{"SLUICE_SYS_PWRITE64", u(SysPwrite64)},
		{"SLUICE_SYS_MADVISE", u(SysMadvise)},
		{"SLUICE_SYS_SOCKET", u(SysSocket)},
		{"SLUICE_SYS_CONNECT", u(SysConnect)},
		{"SLUICE_SYS_SENDTO", u(SysSendto)},
		{"SLUICE_SYS_RECVFROM", u(SysRecvfrom)},
		{"SLUICE_SYS_GETRUSAGE", u(SysGetrusage)},
		{"SLUICE_SYS_GETDENTS64", u(SysGetdents64)},
		{"SLUICE_SYS_CLOCK_GETTIME", u(SysClockGet)},
		{"SLUICE_SYS_OPENAT", u(SysOpenat)},
		{"SLUICE_SYS_MKDIRAT", u(SysMkdirat)},
		{"SLUICE_SYS_UNLINKAT", u(SysUnlinkat)},
		{"SLUICE_SYS_NULL", u(SysNull)},
		{"SLUICE_SYS_CONTEXT_REGISTER", u(SysContextRegister)},
		{"SLUICE_SYS_CONTEXT_UNREGISTER", u(SysContextUnregister)},
		{"SLUICE_SYS_FASTCALL_REGISTER", u(SysFastcallRegister)},
		{"SLUICE_SYS_FASTCALL_REVOKE", u(SysFastcallRevoke)},
		{"SLUICE_ARG_NONE", u(ArgNone)},
		{"SLUICE_ARG_INT", u(ArgInt)},
		{"SLUICE_ARG_PATH", u(ArgPath)},
		{"SLUICE_ARG_BUF", u(ArgBuf)},
		{"SLUICE_ARG_HEAP_OUT", u(ArgHeapOut)},
		{"SLUICE_PATH_MAX", PathMax},
		{"SLUICE_FASTCALL_INDEX_BITS", FastcallIndexBits},
		{"SLUICE_MAX_FASTCALLS", MaxFastcalls},
		{"SLUICE_FASTCALL_GEN_MASK", FastcallGenMask},

		{"SLUICE_ERRNO_PERM", u(ErrnoPERM)},
		{"SLUICE_ERRNO_NOENT", u(ErrnoNOENT)},
		{"SLUICE_ERRNO_SRCH", u(ErrnoSRCH)},
		{"SLUICE_ERRNO_IO", u(ErrnoIO)},
		{"SLUICE_ERRNO_BADF", u(ErrnoBADF)},
		{"SLUICE_ERRNO_AGAIN", u(ErrnoAGAIN)},
		{"SLUICE_ERRNO_NOMEM", u(ErrnoNOMEM)},
		{"SLUICE_ERRNO_ACCES", u(ErrnoACCES)},
		{"SLUICE_ERRNO_FAULT", u(ErrnoFAULT)},
		{"SLUICE_ERRNO_EXIST", u(ErrnoEXIST)},
		{"SLUICE_ERRNO_XDEV", u(ErrnoXDEV)},
		{"SLUICE_ERRNO_NOTDIR", u(ErrnoNOTDIR)},
		{"SLUICE_ERRNO_INVAL", u(ErrnoINVAL)},
		{"SLUICE_ERRNO_MFILE", u(ErrnoMFILE)},
		{"SLUICE_ERRNO_NAMETOOLONG", u(ErrnoNAMETOOLONG)},
		{"SLUICE_ERRNO_NOSYS", u(ErrnoNOSYS)},
		{"SLUICE_ERRNO_LOOP", u(ErrnoLOOP)},
		{"SLUICE_ERRNO_STALE", u(ErrnoSTALE)},

		{"SLUICE_SIM_MODULE_IMAGE", SimModuleImage},
		{"SLUICE_PROG_SYS", ProgSys},
		{"SLUICE_PROG_OUT", ProgOut},
		{"SLUICE_PROG_FIRST_SLOT", ProgFirstSlot},
		{"SLUICE_PROG_SLOTS", ProgSlots},
		{"SLUICE_PROG_GRANULARITY", ProgGranularity},
		{"SLUICE_PROG_ORDERING", ProgOrdering},
		{"SLUICE_PROG_CONTEXT", ProgContext},
		{"SLUICE_PROG_FLAGS", ProgFlags},
		{"SLUICE_PROG_ITERATIONS", ProgIterations},
		{"SLUICE_PROG_SPECIFIC", ProgSpecific},
		{"SLUICE_PROG_ARGS_BASE_SIZE", ProgArgsBaseSize},
		{"SLUICE_PROG_WORK_ITEM", ProgWorkItem},
		{"SLUICE_PROG_WORK_GROUP", ProgWorkGroup},
		{"SLUICE_PROG_KERNEL", ProgKernel},
		{"SLUICE_PROG_STRONG", ProgStrong},
		{"SLUICE_PROG_RELAXED", ProgRelaxed},
		{"SLUICE_PROG_OWN_SLOTS", ProgOwnSlots},
		{"SLUICE_PROG_ORDER_MASK", ProgOrderMask},
		{"SLUICE_KERNEL_SYS_ONE", KernelSysOne},
		{"SLUICE_SYS_ONE_NUMBER", SysOneNumber},
		{"SLUICE_SYS_ONE_ARGS", SysOneArgs},
		{"SLUICE_SYS_ONE_BLOB_SIZE", SysOneBlobSize},
		{"SLUICE_SYS_ONE_OUT_SIZE", SysOneOutSize},
		{"SLUICE_KERNEL_SYS_NULL", KernelSysNull},
		{"SLUICE_NULL_OUT_PER_CALL", NullOutPerCall},
		{"SLUICE_NULL_BLOB_SIZE", NullBlobSize},
		{"SLUICE_NULL_BLOB_SIZE_SLOTS", NullBlobSizeSlots},
		{"SLUICE_NULL_RING", NullRing},
		{"SLUICE_NULL_RING_SLOTS", NullRingSlots},
		{"SLUICE_KERNEL_PREAD_SWEEP", KernelPreadSwp},
		{"SLUICE_SWEEP_FD", SweepFD},
		{"SLUICE_SWEEP_BUF", SweepBuf},
		{"SLUICE_SWEEP_CHUNK", SweepChunk},
		{"SLUICE_SWEEP_FILE_SIZE", SweepFileSize},
		{"SLUICE_SWEEP_HEAP", SweepHeap},
		{"SLUICE_SWEEP_BLOB_SIZE", SweepBlobSize},
		{"SLUICE_SWEEP_OUT_PER_CALL", SweepOutPerCall},
		{"SLUICE_KERNEL_WORD_COUNT", KernelWordCount},
		{"SLUICE_WC_PATHS", WCPaths},
		{"SLUICE_WC_NUM_PATHS", WCNumPaths},
		{"SLUICE_WC_BUF", WCBuf},
		{"SLUICE_WC_CHUNK", WCChunk},
		{"SLUICE_WC_HEAP", WCHeap},
		{"SLUICE_WC_BLOB_SIZE", WCBlobSize},
		{"SLUICE_WC_OUT_PER_GROUP", WCOutPerGroup},
	}
}

// cField is one member of a C struct: where the Go side puts it and how
// wide it is. group names a view of the struct whose members must tile it
// exactly, reserved bytes included (a record has one view per payload).
type cField struct {
	group  string
	strct  string
	member string
	off    uint64
	size   uint64
}

func cFields() []cField {
	hdr := func(member string, off, size uint64) cField {
		return cField{"header", "struct sluice_header", member, off, size}
	}
	ch := func(member string, off, size uint64) cField {
		return cField{"channel", "struct sluice_channel", member, off, size}
	}
	slot := func(member string, off, size uint64) cField {
		return cField{"slot", "struct sluice_syscall_slot", member, off, size}
	}
	fs := []cField{
		hdr("magic", HdrMagic, 4),
		hdr("version_major", HdrVersionMajor, 2),
		hdr("version_minor", HdrVersionMinor, 2),
		hdr("features", HdrFeatures, 8),
		hdr("host_peer_id", HdrHostPeerID, 4),
		hdr("channels", HdrChannels, 4),
		hdr("ring_entries", HdrRingEntries, 4),
		hdr("syscall_slots", HdrSyscallSlots, 4),
		hdr("region_size", HdrRegionSize, 8),
		hdr("channels_off", HdrChannelsOff, 8),
		hdr("rings_off", HdrRingsOff, 8),
		hdr("syscall_off", HdrSyscallOff, 8),
		hdr("syscall_size", HdrSyscallSize, 8),
		hdr("heap_off", HdrHeapOff, 8),
		hdr("heap_size", HdrHeapSize, 8),
		hdr("epoch", HdrEpoch, 8),
		hdr("heartbeat", HdrHeartbeat, 8),
		hdr("syscall_vector", HdrSyscallVector, 4),
		hdr("control_vector", HdrControlVector, 4),
		hdr("max_throttle_ns", HdrMaxThrottleNs, 8),
		hdr("max_alloc_size", HdrMaxAllocSize, 8),
		hdr("host_polling", HdrPolling, 4),
		hdr("reserved", hdrEnd, HeaderSize-hdrEnd),

		ch("put", ChPut, 4),
		ch("reset", ChReset, 4),
		ch("wake", ChWake, 8),
		ch("guest_reserved", ChWake+8, ChGet-ChWake-8),
		ch("get", ChGet, 4),
		ch("error", ChError, 4),
		ch("error_index", ChErrorIndex, 4),
		ch("reset_ack", ChResetAck, 4),
		ch("fence", ChFence, 8),
		ch("completed", ChCompleted, 8),
		ch("state", ChState, 4),
		ch("host_reserved", ChState+4, ChannelDescSize-ChState-4),

		slot("state", SysState, 4),
		slot("number", SysNumber, 2),
		slot("flags", SysFlags, 1),
		slot("context", SysContext, 1),
		slot("args", SysArgs, 8*SysArgCount),
		slot("args[0]", SysRet, 8),
		slot("args[1]", SysErrno, 8),
		slot("cookie", SysCookie, 8),

		{"ring", "struct sluice_syscall_ring_entry", "tag", RingTag, 4},
		{"ring", "struct sluice_syscall_ring_entry", "number", RingNumber, 2},
		{"ring", "struct sluice_syscall_ring_entry", "flags", RingFlags, 1},
		{"ring", "struct sluice_syscall_ring_entry", "context", RingContext, 1},
		{"ring", "struct sluice_syscall_ring_entry", "args", RingArgs, 8 * SysArgCount},
		{"ring", "struct sluice_syscall_ring_entry", "slot", RingSlot, 4},
		{"ring", "struct sluice_syscall_ring_entry", "seq", RingSeq, 4},

		{"reloc", "struct sluice_reloc", "arg_offset", 0, 4}, // "u32 arg offset, u32 kind" (record.go)
		{"reloc", "struct sluice_reloc", "kind", 4, 4},
	}
	fs = append(fs, progFields()...)
	payloads := map[string][]cField{
		"fence":    {{member: "value", off: FenceValue, size: 8}, {member: "reserved", off: FenceValue + 8, size: 48}},
		"throttle": {{member: "ns", off: ThrottleNs, size: 8}, {member: "reserved", off: ThrottleNs + 8, size: 48}},
		"memset": {
			{member: "offset", off: MemsetOffset, size: 8},
			{member: "length", off: MemsetLength, size: 8},
			{member: "value", off: MemsetValue, size: 4},
			{member: "reserved", off: MemsetValue + 4, size: RecordSize - MemsetValue - 4},
		},
		"copy": {
			{member: "dir", off: CopyDir, size: 4},
			{member: "src_handle", off: CopySrcHandle, size: 4},
			{member: "offset", off: CopyOffset, size: 8},
			{member: "heap_off", off: CopyHeapOff, size: 8},
			{member: "length", off: CopyLength, size: 8},
			{member: "reserved", off: CopyLength + 8, size: RecordSize - CopyLength - 8},
		},
		"alloc": {{member: "size", off: AllocSize, size: 8}, {member: "reserved", off: AllocSize + 8, size: 48}},
		"load_module": {
			{member: "format", off: ModFormat, size: 4},
			{member: "reserved0", off: ModFormat + 4, size: ModHeapOff - ModFormat - 4},
			{member: "heap_off", off: ModHeapOff, size: 8},
			{member: "length", off: ModLength, size: 8},
			{member: "reserved", off: ModLength + 8, size: RecordSize - ModLength - 8},
		},
		"launch": {
			{member: "grid", off: LaunchGrid, size: 12},
			{member: "block", off: LaunchBlock, size: 12},
			{member: "shared_mem", off: LaunchSharedMem, size: 4},
			{member: "name_len", off: LaunchNameLen, size: 4},
			{member: "name_off", off: LaunchNameOff, size: 8},
			{member: "args_off", off: LaunchArgsOff, size: 8},
			{member: "args_len", off: LaunchArgsLen, size: 4},
			{member: "relocs", off: LaunchRelocs, size: 4},
		},
		"raw": {{member: "", off: RecArg0, size: RecordSize - RecArg0}},
	}
	for name, members := range payloads {
		group := "cmd/" + name
		fs = append(fs,
			cField{group, "struct sluice_cmd", "opcode", RecOpcode, 2},
			cField{group, "struct sluice_cmd", "flags", RecFlags, 2},
			cField{group, "struct sluice_cmd", "handle", RecHandle, 4},
		)
		for _, m := range members {
			member := "u." + name
			if m.member != "" {
				member += "." + m.member
			}
			fs = append(fs, cField{group, "struct sluice_cmd", member, m.off, m.size})
			if m.member != "" {
				// The payload struct on its own: offsets relative to the
				// payload, so that guests may build one separately.
				fs = append(fs, cField{"payload/" + name, "struct sluice_cmd_" + name, m.member, m.off - RecArg0, m.size})
			}
		}
	}
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].group < fs[j].group })
	return fs
}

// progFields are the programs' argument blobs (kernels.go): the common part
// on its own, then each program's blob, which starts with it.
func progFields() []cField {
	base := []cField{
		{member: "sys", off: ProgSys, size: 8},
		{member: "out", off: ProgOut, size: 8},
		{member: "first_slot", off: ProgFirstSlot, size: 4},
		{member: "nslots", off: ProgSlots, size: 4},
		{member: "granularity", off: ProgGranularity, size: 1},
		{member: "ordering", off: ProgOrdering, size: 1},
		{member: "context", off: ProgContext, size: 1},
		{member: "flags", off: ProgFlags, size: 1},
		{member: "iterations", off: ProgIterations, size: 4},
	}
	blobs := []struct {
		group, strct string
		members      []cField
	}{
		{"prog/sys_one", "struct sluice_sys_one_args", []cField{
			{member: "number", off: SysOneNumber, size: 4},
			{member: "pad", off: SysOneNumber + 4, size: SysOneArgs - SysOneNumber - 4},
			{member: "args", off: SysOneArgs, size: 8 * SysArgCount},
		}},
		{"prog/null", "struct sluice_sys_null_args", []cField{
			{member: "ring", off: NullRing, size: 8},
			{member: "ring_slots", off: NullRingSlots, size: 4},
			{member: "pad", off: NullRingSlots + 4, size: 4},
		}},
		{"prog/sweep", "struct sluice_sweep_args", []cField{
			{member: "fd", off: SweepFD, size: 4},
			{member: "pad", off: SweepFD + 4, size: SweepBuf - SweepFD - 4},
			{member: "buf", off: SweepBuf, size: 8},
			{member: "chunk", off: SweepChunk, size: 8},
			{member: "file_size", off: SweepFileSize, size: 8},
			{member: "heap", off: SweepHeap, size: 8},
		}},
		{"prog/wc", "struct sluice_wc_args", []cField{
			{member: "paths", off: WCPaths, size: 8},
			{member: "npaths", off: WCNumPaths, size: 4},
			{member: "pad", off: WCNumPaths + 4, size: WCBuf - WCNumPaths - 4},
			{member: "buf", off: WCBuf, size: 8},
			{member: "chunk", off: WCChunk, size: 8},
			{member: "heap", off: WCHeap, size: 8},
		}},
	}
	var fs []cField
	for _, m := range base {
		fs = append(fs, cField{"prog", "struct sluice_prog_args", m.member, m.off, m.size})
	}
	for _, b := range blobs {
		for _, m := range base {
			fs = append(fs, cField{b.group, b.strct, "prog." + m.member, m.off, m.size})
		}
		for _, m := range b.members {
			fs = append(fs, cField{b.group, b.strct, m.member, m.off, m.size})
		}
	}
	return fs
}

// cSizeChecks are the sizes of the structs.
func cSizeChecks() []cCheck {
	cs := []cCheck{
		{"sizeof(struct sluice_header)", HeaderSize},
		{"sizeof(struct sluice_channel)", ChannelDescSize},
		{"sizeof(struct sluice_cmd)", RecordSize},
		{"sizeof(((struct sluice_cmd *)0)->u)", RecordSize - RecArg0},
		{"sizeof(struct sluice_reloc)", RelocSize},
		{"sizeof(struct sluice_syscall_slot)", SyscallSlotSize},
		{"sizeof(struct sluice_syscall_ring_entry)", SyscallRingEntrySize},
		{"sizeof(struct sluice_prog_args)", ProgArgsBaseSize},
		{"sizeof(struct sluice_sys_one_args)", SysOneBlobSize},
		{"sizeof(struct sluice_sweep_args)", SweepBlobSize},
		{"sizeof(struct sluice_wc_args)", WCBlobSize},
	}
	for _, p := range []string{"fence", "throttle", "memset", "copy", "alloc", "load_module", "launch"} {
		cs = append(cs, cCheck{"sizeof(struct sluice_cmd_" + p + ")", RecordSize - RecArg0})
	}
	return cs
}

// The layout the helper checks run against: small rings, so that index
// wrap-around is visible, and channel 3 of 4.
var cHelperLayout = LayoutConfig{RegionSize: 1 << 20, Channels: 4, RingEntries: 16, SyscallSlots: 128}

// cHelperChecks run the header's inline helpers on a header struct holding
// the layout l (the program sets it up) and a region at base.
func cHelperChecks(t *testing.T, l Layout) []cCheck {
	const peer = 0x2a
	cs := []cCheck{
		{"sluice_doorbell(0x2a, 3)", peer<<16 | 3},
		{"sluice_doorbell(0xffff, 0xffff)", 0xffffffff},
		{"sluice_channel_vector(3)", 3},
		{"sluice_wake_word(0x2a, 7)", WakeWord(peer, 7)},
		{"sluice_wake_word(0xffff, 0xffffffffu)", WakeWord(0xffff, 0xffffffff)},
		{"sluice_syscall_vector(4)", uint64(SyscallVector(4))},
		{"sluice_control_vector(4)", uint64(ControlVector(4))},
		{"sluice_syscall_vector(64)", uint64(SyscallVector(64))},
		{"sluice_control_vector(64)", uint64(ControlVector(64))},
		{"sluice_launch_blob_size(0, 0)", LaunchBlobSize(0, 0)},
		{"sluice_launch_blob_size(13, 3)", LaunchBlobSize(13, 3)},
		{"sluice_launch_blob_size(16, 64)", LaunchBlobSize(16, 64)},
		{"sluice_launch_blob_size(0xffffffffu, 0xffffffffu)", LaunchBlobSize(0xffffffff, 0xffffffff)},
		{"sluice_slot_word(SLUICE_SLOT_READY, 0x123456)", u(SlotWord(SlotReady, 0x123456))},
		{"sluice_slot_word(SLUICE_SLOT_FINISHED, 0xfffffffu)", u(SlotWord(SlotFinished, 0xfffffff))},
		{"sluice_slot_state(0xabcdef03u)", 3},
		{"sluice_slot_seq(0xabcdef03u)", 0xabcdef},
		{"sluice_next_seq(7)", NextSeq(7)},
		{"sluice_next_seq(0xffffffu)", NextSeq(0xffffff)},
		{"sluice_fastcall_number(5, 3)", u(FastcallNumber(5, 3))},
		{"sluice_fastcall_number(0x3ff, 0x3f)", u(FastcallNumber(0x3ff, 0x3f))},
		{"sluice_fastcall_number(0x401, 0x41)", u(FastcallNumber(0x401, 0x41))},
		{"sluice_fastcall_index(0xfc05)", 5},
		{"sluice_fastcall_gen(0xfc05)", 0x3f},
		{"(uintptr_t)sluice_channel_desc(base, &h, 0) - (uintptr_t)base", l.ChannelOff(0)},
		{"(uintptr_t)sluice_channel_desc(base, &h, 3) - (uintptr_t)base", l.ChannelOff(3)},
		{"(uintptr_t)sluice_syscall_bitmap(base, &h) - (uintptr_t)base", l.SyscallOff + SyscallBitmapOff},
		{"(uintptr_t)sluice_syscall_ready_map(base, &h) - (uintptr_t)base", l.SyscallOff + SyscallReadyMapOff},
		{"(uintptr_t)sluice_syscall_slot_at(base, &h, 0) - (uintptr_t)base", l.SyscallOff + SyscallSlotsOff},
		{"(uintptr_t)sluice_syscall_slot_at(base, &h, 127) - (uintptr_t)base", l.SyscallOff + SyscallSlotsOff + 127*SyscallSlotSize},
	}
	for _, c := range []uint32{0, 3} {
		for _, i := range []uint32{0, 1, 15, 16, 17, 0x7fffffff, 0xffffffff} {
			cs = append(cs,
				cCheck{fmt.Sprintf("sluice_record_off(&h, %d, %#xu)", c, i), l.RecordOff(c, i)},
				cCheck{fmt.Sprintf("(uintptr_t)sluice_ring_record(base, &h, %d, %#xu) - (uintptr_t)base", c, i), l.RecordOff(c, i)})
		}
	}
	// sluice_ring_space is how far a guest may advance put: exactly as far
	// as CheckPut accepts.
	entries := l.RingEntries
	for _, pg := range [][2]uint32{{0, 0}, {5, 0}, {16, 0}, {17, 0}, {3, 0xfffffffd}, {0xfffffffe, 0xfffffff0}, {0, 1}} {
		put, get := pg[0], pg[1]
		var want uint32
		if put-get <= entries {
			want = entries - (put - get)
			if n, code := CheckPut(put+want, get, get, entries); code != OK || n != entries {
				t.Fatalf("CheckPut(%d+%d, %d) = %d, %v: the ring space table is wrong", put, want, get, n, code)
			}
			if _, code := CheckPut(put+want+1, get, get, entries); code == OK {
				t.Fatalf("CheckPut accepts put %d+%d+1 over get %d", put, want, get)
			}
		}
		cs = append(cs, cCheck{fmt.Sprintf("sluice_ring_space(%#xu, %#xu, %d)", put, get, entries), uint64(want)})
	}
	return cs
}
