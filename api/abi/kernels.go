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
//	25  u8  ordering     ProgStrong or ProgRelaxed, optionally | ProgOwnSlots
//	26  u8  context      the guest context of every call
//	27  u8  flags        slot flags (SysFlagBlocking is implied where a result is used)
//	28  u32 iterations   calls per caller (programs that repeat)
//	32  ...              program-specific
//
// A caller is a work-item, a work-group's first work-item or the kernel's
// first work-item, by granularity; caller c uses slot first_slot + c %
// nslots, and callers that share a slot take turns. (The PTX programs take
// turns with a lock in the low word of the slot's cookie and then move
// FREE → POPULATING with a plain store: a GPU without PCIe atomics cannot
// compare-and-swap a word the host writes, see sluice_syscall.h. The host
// sees the same states either way; the sim's programs may use the CAS.) Callers are numbered by linear id: work-item
// granularity, the work-item's index in the grid (block id × block size +
// thread id, x fastest); work-group granularity, the work-group's index in
// the grid; kernel granularity, a single caller 0. With nslots 0, or a
// granularity other than the three, a program makes no call and writes
// nothing.
//
// Ordering applies to work-group granularity: strong puts a barrier before
// each call (then the caller's system-scope fence, so that the group's
// writes reach the host first) and one after it, the group waiting for the
// result; relaxed (any value but ProgStrong) has none, and the work-items
// other than the caller have nothing more to do. Work-item granularity is
// strong by nature; kernel granularity is always relaxed (a barrier over the
// whole grid could deadlock, GENESYS §4.1).
//
// ProgOwnSlots (a bit of the ordering byte, masked off by ProgOrderMask)
// says that the launch owns its slots: its callers do not share them
// (nslots ≥ callers) and nothing else uses them while it runs. A caller then
// makes its calls without the cookie lock and without reading the state word
// at each claim: it reads its slot's state once, waits for FREE|s, and keeps
// the sequence number itself (after a non-blocking call, which the host
// frees, it waits for FREE again before the next). A launch with more callers
// than slots ignores the bit (the programs check). Break the promise and
// calls may be lost or mixed up (the launch's own), never another's: the
// host's checks are the same either way.
//
// Pointer arguments of calls are heap offsets (the host reads them so); a
// program that reads what a call wrote (pread's bytes) gets the heap's
// device address in a field of its own (SweepHeap, WCHeap: the guest writes
// 0 there with a RelocHeap relocation) and reads at that address plus the
// heap offset.
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

	ProgOwnSlots  = 0x80 // ordering bit: the launch's callers own their slots (see above)
	ProgOrderMask = 0x7f // the ordering byte less its option bits
)

// The programs, by kernel name, and their specific arguments.
const (
	// KernelSysOne makes one call (from one caller: caller 0, whatever the
	// granularity; with work-group granularity and strong ordering work-group
	// 0 waits at the barriers) and writes i64 ret, u64 errno to out. It always
	// waits for the result (SysFlagBlocking is added to flags); iterations is
	// ignored.
	//	32 u32 number, 36 u32 pad, 40 u64 args[6]
	KernelSysOne   = "sluice_sys_one"
	SysOneNumber   = 32
	SysOneArgs     = 40
	SysOneBlobSize = 88
	SysOneOutSize  = 16
	// KernelSysNull makes iterations SysNull calls per caller, with flags as
	// given: the round trip of a blocking call runs from before the claim
	// (before the first barrier of a strongly ordered work-group call) to
	// after the result is read and the slot freed (after the second
	// barrier); of a non-blocking one, to the ring (the host frees the
	// slot). Times are %globaltimer ns, saturated at 2^32-1.
	//
	//	32 u64 ring        0, or 0 with RelocSyscallRing: the calls go through
	//	                   the request ring (sysring.go), its claim counter there
	//	40 u32 ring_slots  the area's slot count (the ring's length), with ring
	//	44 u32 pad         zero
	//
	// A blob of 32 bytes (before the ring) makes its calls through the slots.
	KernelSysNull     = "sluice_sys_null"
	NullOutPerCall    = 4 // u32 round-trip ns per call, out[caller*iterations + i]
	NullRing          = 32
	NullRingSlots     = 40
	NullBlobSizeSlots = 32
	NullBlobSize      = 48
	// KernelPreadSwp reads [0, file_size) in chunks: chunk k covers
	// [k*chunk, min((k+1)*chunk, file_size)); with N callers, caller c
	// preads chunks c, c+N, c+2N, ... in order into its buffer buf + c*chunk,
	// and does the whole sweep max(iterations, 1) times. Each pread is
	// blocking (flags | SysFlagBlocking); a result with errno != 0 counts as
	// a failed call, otherwise min(ret, chunk) bytes (none if ret <= 0) are
	// added to bytes read and their values (unsigned) to the sum. With
	// work-group granularity and strong ordering every work-item of the
	// group helps summing.
	KernelPreadSwp  = "sluice_pread_sweep"
	SweepFD         = 32 // u32 fd (in the context)
	SweepBuf        = 40 // u64 heap offset of the callers' buffers, chunk bytes each
	SweepChunk      = 48 // u64 bytes per pread
	SweepFileSize   = 56 // u64 bytes to sweep
	SweepHeap       = 64 // u64 0 with RelocHeap: the heap's device address (the kernel reads the buffers there)
	SweepBlobSize   = 72
	SweepOutPerCall = 24 // per caller: u64 bytes read, u64 failed calls, u64 sum of the bytes read
	// KernelWordCount counts the words of files: work-group g takes files g,
	// g+groups, ...: openat, pread chunk by chunk into its buffer, count
	// (every work-item of the group scans part of the chunk), close.
	//	32 u64 paths (heap offset of npaths NUL-terminated paths, back to back)
	//	40 u32 npaths, 44 u32 pad, 48 u64 buf (heap offset, chunk bytes per group), 56 u64 chunk
	//	64 u64 heap (0 with RelocHeap: the heap's device address)
	// out per work-group: u64 words, u64 bytes, u64 errno of the first failure.
	//
	// A word is a maximal run of bytes other than ' ', '\t', '\n', '\v',
	// '\f' and '\r'; a word never spans two files, and one cut by a chunk
	// boundary counts once. The calls are openat(AT_FDCWD, path, O_RDONLY,
	// 0), pread64(fd, buf + g*chunk, chunk, offset) until it returns 0 (or
	// less), and close(fd), all blocking, in the context; offset advances
	// by min(ret, chunk), which is what bytes counts. A failed call records
	// its errno if it is the group's first failure and ends that file (after
	// closing it if it was open); the group goes on with its next file.
	// Granularity: work-item counts as work-group (the buffers are per
	// group); kernel: work-item 0 of work-group 0 takes every file, with
	// buffer buf, and counts alone (relaxed). Ordering strong: the whole
	// group counts; relaxed: the caller counts alone. Work-groups without
	// files write zeros; iterations is ignored.
	KernelWordCount = "sluice_wordcount"
	WCPaths         = 32
	WCNumPaths      = 40
	WCBuf           = 48
	WCChunk         = 56
	WCHeap          = 64
	WCBlobSize      = 72
	WCOutPerGroup   = 24
	SimModuleImage  = "sluice-sim"
)
