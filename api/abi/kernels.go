package abi

// GPU programs that make system calls (ABI 1.1): the kernels a guest
// launches to use the syscall area. The sim backend has them built in
// (LOAD_MODULE with ModuleSim); for an NVIDIA GPU they are PTX generated from
// include/sluice_syscall.h and guest-agent/kernels. Both take the same
// argument blob, described here and by struct sluice_prog_args in the C
// header.
//
// Every program's blob starts with ProgArgs; the program-specific part
// follows at ProgSpecific.
//
//	0   u64 sys          RelocSyscall: the syscall area
//	8   u64 out          RelocHeap: where the program writes its results
//	16  u32 first_slot   the slots this launch may use: [first_slot, first_slot+nslots)
//	20  u32 nslots
//	24  u8  granularity  ProgWorkItem, ProgWorkGroup or ProgKernel: which threads call
//	25  u8  ordering     ProgStrong or ProgRelaxed
//	26  u8  context      the guest context of every call
//	27  u8  flags        slot flags (SysFlagBlocking is implied where a result is used)
//	28  u32 iterations   calls per caller (programs that repeat)
//	32  ...              program-specific
//
// A caller is a work-item, a work-group's first work-item or the kernel's
// first work-item, by granularity; caller c uses slot first_slot + c %
// nslots, claimed with compare-and-swap FREE → POPULATING, so callers that
// share a slot take turns.
const (
	ProgSys          = 0
	ProgOut          = 8
	ProgFirstSlot    = 16
	ProgSlots        = 20
	ProgGranularity  = 24
	ProgOrdering     = 25
	ProgContext      = 26
	ProgFlags        = 27
	ProgIterations   = 28
	ProgSpecific     = 32
	ProgArgsBaseSize = 32
)

// Granularities and orderings (GENESYS §4.1).
const (
	ProgWorkItem  = 0 // every work-item calls
	ProgWorkGroup = 1 // one work-item per work-group calls, the others wait at a barrier (strong) or go on (relaxed)
	ProgKernel    = 2 // one work-item of the kernel calls

	ProgStrong  = 0 // callers' earlier memory writes are visible to the host first; the group waits for the result
	ProgRelaxed = 1 // no barrier: the other work-items of the group go on
)

// The programs, by kernel name, and their specific arguments.
const (
	// KernelSysOne makes one call (from one caller) and writes i64 ret, u64
	// errno to out.
	//	32 u32 number, 36 u32 pad, 40 u64 args[6]
	KernelSysOne    = "sluice_sys_one"
	SysOneNumber    = 32
	SysOneArgs      = 40
	SysOneBlobSize  = 88
	SysOneOutSize   = 16
	KernelSysNull   = "sluice_sys_null"
	NullOutPerCall  = 4 // u32 round-trip ns per call, out[caller*iterations + i]
	NullBlobSize    = 32
	KernelPreadSwp  = "sluice_pread_sweep"
	SweepFD         = 32 // u32 fd (in the context)
	SweepBuf        = 40 // u64 heap offset of the callers' buffers, chunk bytes each
	SweepChunk      = 48 // u64 bytes per pread
	SweepFileSize   = 56 // u64 bytes to sweep
	SweepBlobSize   = 64
	SweepOutPerCall = 24 // per caller: u64 bytes read, u64 failed calls, u64 sum of the bytes read
	// KernelWordCount counts the words of files: work-group g takes files g,
	// g+groups, ...: openat, pread chunk by chunk into its buffer, count
	// (every work-item of the group scans part of the chunk), close.
	//	32 u64 paths (heap offset of npaths NUL-terminated paths, back to back)
	//	40 u32 npaths, 44 u32 pad, 48 u64 buf (heap offset, chunk bytes per group), 56 u64 chunk
	// out per work-group: u64 words, u64 bytes, u64 errno of the first failure.
	KernelWordCount = "sluice_wordcount"
	WCPaths         = 32
	WCNumPaths      = 40
	WCBuf           = 48
	WCChunk         = 56
	WCBlobSize      = 64
	WCOutPerGroup   = 24
	SimModuleImage  = "sluice-sim"
)
