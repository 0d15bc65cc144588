/*
 * sluice_syscall.h - making system calls through the Sluice syscall area
 * (ABI 1.1), for GPU kernels and for CPU code. Header only.
 *
 * The same functions compile
 *   - as CUDA device code (nvcc, or clang -x cuda; __CUDA_ARCH__ >= 700):
 *     the slots live in host memory the GPU reaches over PCIe, so every
 *     access that orders the protocol is system scope: ld.acquire.sys for
 *     the state word, atom.acquire.sys.cas for the claim, st.release.sys to
 *     publish (a release is fence.acq_rel.sys then the store), volatile
 *     accesses for the other fields;
 *   - as C99/C11 or C++ on a CPU (gcc, clang): GCC's __atomic builtins, for
 *     tests and CPU guests.
 * Spinning work-items of one warp may wait on each other (two callers
 * sharing a slot): that needs the independent thread scheduling of sm_70
 * and later.
 *
 * No GPU atomic touches a word the host writes. Where the platform lacks
 * PCIe atomics (CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED 0, as on
 * an H200 behind an x86 root port), a GPU atomic on host memory is atomic
 * among GPU threads only: it reads, modifies and writes back, even when a
 * compare-and-swap fails, and so can undo a host store that landed in
 * between (a slot the host had taken or freed turns READY again and runs
 * twice). So on a GPU, callers sharing a slot exclude each other with a
 * lock in the low 32 bits of the slot's cookie (the guest's own word, which
 * the host never writes), and the lock holder moves the state word with
 * plain stores: it waits for FREE|s, stores POPULATING|s, then READY|s.
 * The host sees the protocol of sluice_abi.h unchanged. Consequences: on a
 * GPU the library owns the cookie (it must be 0 when a slot is first used:
 * the area starts zeroed), and a slot must not be shared between GPU and
 * CPU callers. A CPU caller claims by compare-and-swap on the state word.
 *
 * The protocol (sluice_abi.h, struct sluice_syscall_slot):
 *
 *   seq = sluice_sys_claim(slot);          FREE|s -> POPULATING|s
 *   sluice_sys_populate(slot, nr, flags, context, args);
 *   sluice_sys_ring(slot, seq, flags);     READY|s, release
 *   r = sluice_sys_wait(slot, seq);        FINISHED|s: ret, errno; FREE|s+1
 *
 * or sluice_syscall() for all four. A call without SLUICE_SYS_FLAG_BLOCKING
 * ends at the ring: the host frees the slot and discards the result. The
 * ready bitmap (a hint) is left alone: the host scans the state words.
 *
 * Tuning, by defining before the include:
 *   SLUICE_POLL_MAX_NS  longest GPU back-off between two polls of a state
 *                       word, nanoseconds (default 512; 0: spin without
 *                       sleeping). The back-off doubles from 32 ns.
 *   SLUICE_CPU_RELAX()  what a CPU does between two polls (default: a pause
 *                       instruction where there is one).
 *
 * Pointer arguments of calls are heap offsets, not addresses: the host
 * resolves them against the VM's heap.
 */
#ifndef SLUICE_SYSCALL_H
#define SLUICE_SYSCALL_H

#include "sluice_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__CUDACC__) || defined(__CUDA__)
#define SLUICE_SYS_FN static __inline__ __host__ __device__
#define SLUICE_DEV_FN static __inline__ __device__
#else
#define SLUICE_SYS_FN static inline
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#error "sluice_syscall.h needs sm_70 or later (acquire/release at system scope, independent thread scheduling)"
#endif

#ifndef SLUICE_POLL_MAX_NS
#define SLUICE_POLL_MAX_NS 512
#endif

#ifndef SLUICE_CPU_RELAX
#if defined(__x86_64__) || defined(__i386__)
#define SLUICE_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define SLUICE_CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define SLUICE_CPU_RELAX() ((void)0)
#endif
#endif

/* The result of a call: the host's args[0] and args[1]. */
struct sluice_sysret {
	int64_t ret;  /* the call's return value (Linux's: -1 on failure is not used; see err) */
	uint64_t err; /* errno, 0 on success */
};

/* ------------------------------------------------------------------------
 * Memory accesses to the slots
 * ------------------------------------------------------------------------ */

/* Load a state word with acquire ordering: what the host wrote before it
 * stored the word is visible after. */
SLUICE_SYS_FN uint32_t sluice_sys_load_acquire(uint32_t *p)
{
#ifdef __CUDA_ARCH__
	uint32_t v;
	asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
#else
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

/* Store a state word with release ordering: everything this thread wrote
 * (and, on a GPU, what it observed others write) before is visible first. */
SLUICE_SYS_FN void sluice_sys_store_release(uint32_t *p, uint32_t v)
{
#ifdef __CUDA_ARCH__
	asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

/* Compare-and-swap a word, acquire ordering on success; returns the word it
 * found (== old when the swap happened). On a GPU without host-native
 * atomics it is atomic among GPU threads only (see above): the claim does
 * not use it there. */
SLUICE_SYS_FN uint32_t sluice_sys_cas_acquire(uint32_t *p, uint32_t old, uint32_t nw)
{
#ifdef __CUDA_ARCH__
	uint32_t v;
	asm volatile("atom.acquire.sys.cas.b32 %0, [%1], %2, %3;" : "=r"(v) : "l"(p), "r"(old), "r"(nw) : "memory");
	return v;
#else
	uint32_t seen = old;
	__atomic_compare_exchange_n(p, &seen, nw, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE);
	return seen;
#endif
}

#ifdef __CUDA_ARCH__
/* The GPU callers' lock on a slot: the low word of its cookie. */
SLUICE_SYS_FN uint32_t *sluice_sys_lock_word(struct sluice_syscall_slot *slot) { return (uint32_t *)&slot->cookie; }

/* Take the lock if it is free (acquire, among the GPU's threads). */
SLUICE_SYS_FN int sluice_sys_try_lock(struct sluice_syscall_slot *slot)
{
	uint32_t v;
	asm volatile("atom.acquire.gpu.cas.b32 %0, [%1], 0, 1;" : "=r"(v) : "l"(sluice_sys_lock_word(slot)) : "memory");
	return v == 0;
}

/* Release the lock: what the holder did to the slot comes first. */
SLUICE_SYS_FN void sluice_sys_unlock(struct sluice_syscall_slot *slot)
{
	asm volatile("st.release.gpu.u32 [%0], 0;" ::"l"(sluice_sys_lock_word(slot)) : "memory");
}
#endif

/* A sequentially consistent fence at system scope (the GPU and the host). */
SLUICE_SYS_FN void sluice_fence_system(void)
{
#ifdef __CUDA_ARCH__
	asm volatile("fence.sc.sys;" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/* Wait a little before polling again; *ns is the back-off state (start at
 * 0). */
SLUICE_SYS_FN void sluice_sys_backoff(uint32_t *ns)
{
#ifdef __CUDA_ARCH__
	if (SLUICE_POLL_MAX_NS == 0)
		return;
	*ns = *ns == 0 ? 32 : *ns * 2;
	if (*ns > SLUICE_POLL_MAX_NS)
		*ns = SLUICE_POLL_MAX_NS;
	asm volatile("nanosleep.u32 %0;" ::"r"(*ns));
#else
	(void)ns;
	SLUICE_CPU_RELAX();
#endif
}

/* ------------------------------------------------------------------------
 * One call, step by step
 * ------------------------------------------------------------------------ */

/* Slot i of the syscall area at sys (the area's start: header.syscall_off
 * in a mapped region, or a SLUICE_RELOC_SYSCALL argument on a GPU). */
SLUICE_SYS_FN struct sluice_syscall_slot *sluice_sys_slot(void *sys, uint32_t i)
{
	return (struct sluice_syscall_slot *)((uint8_t *)sys + SLUICE_SYSCALL_SLOTS_OFF +
	                                      (uint64_t)i * SLUICE_SYSCALL_SLOT_SIZE);
}

/* Try once to take the slot: FREE|s -> POPULATING|s. Returns 1 with *seq = s
 * when this caller owns the slot now, 0 when it is busy (or another caller
 * won the race). On a GPU the caller holds the slot's lock from here until
 * the slot is freed (blocking) or rung (non-blocking). */
SLUICE_SYS_FN int sluice_sys_try_claim(struct sluice_syscall_slot *slot, uint32_t *seq)
{
	uint32_t w, s;
#ifdef __CUDA_ARCH__
	if (!sluice_sys_try_lock(slot))
		return 0;
	w = sluice_sys_load_acquire(&slot->state);
	s = sluice_slot_seq(w);
	if (sluice_slot_state(w) != SLUICE_SLOT_FREE) {
		sluice_sys_unlock(slot);
		return 0;
	}
	/* Only the lock holder writes the word while it is FREE. */
	((volatile struct sluice_syscall_slot *)slot)->state = sluice_slot_word(SLUICE_SLOT_POPULATING, s);
#else
	w = sluice_sys_load_acquire(&slot->state);
	s = sluice_slot_seq(w);
	if (sluice_slot_state(w) != SLUICE_SLOT_FREE)
		return 0;
	if (sluice_sys_cas_acquire(&slot->state, w, sluice_slot_word(SLUICE_SLOT_POPULATING, s)) != w)
		return 0;
#endif
	*seq = s;
	return 1;
}

/* Take the slot, waiting while it is not FREE (callers sharing a slot take
 * turns; a non-blocking call's slot is free once the host copied it).
 * Returns the sequence number to ring and wait with. */
SLUICE_SYS_FN uint32_t sluice_sys_claim(struct sluice_syscall_slot *slot)
{
	uint32_t seq = 0, ns = 0;
	while (!sluice_sys_try_claim(slot, &seq))
		sluice_sys_backoff(&ns);
	return seq;
}

/* Fill a claimed slot: the call number (or fastcall number, with
 * SLUICE_SYS_FLAG_FASTCALL), the flags, the guest context (0: the VM's
 * default), and the six arguments (args NULL: all zero). The cookie is left
 * as it is (a CPU caller may set it; on a GPU it is the lock). */
SLUICE_SYS_FN void sluice_sys_populate(struct sluice_syscall_slot *slot, uint16_t number, uint8_t flags,
                                       uint8_t context, const uint64_t *args)
{
	volatile struct sluice_syscall_slot *v = slot;
	int i;
	v->number = number;
	v->flags = flags;
	v->context = context;
	for (i = 0; i < SLUICE_SYS_ARG_COUNT; i++)
		v->args[i] = args ? args[i] : 0;
}

/* Hand a populated slot to the host: READY|seq, with release ordering so
 * that the host sees the arguments (and, for a strongly ordered work-group
 * call, what the group wrote before its barrier). flags are the call's, as
 * populated: a non-blocking call is over for the caller here. */
SLUICE_SYS_FN void sluice_sys_ring(struct sluice_syscall_slot *slot, uint32_t seq, uint8_t flags)
{
	sluice_sys_store_release(&slot->state, sluice_slot_word(SLUICE_SLOT_READY, seq));
#ifdef __CUDA_ARCH__
	/* The next holder waits for the host's FREE|seq+1. */
	if (!(flags & SLUICE_SYS_FLAG_BLOCKING))
		sluice_sys_unlock(slot);
#else
	(void)flags;
#endif
}

/* Check once whether the blocking call rung with seq has finished. If so,
 * store its result in *r, free the slot (FREE|seq+1) and return 1; else
 * return 0 (call it again later: the GPU can do other work in between). */
SLUICE_SYS_FN int sluice_sys_poll(struct sluice_syscall_slot *slot, uint32_t seq, struct sluice_sysret *r)
{
	volatile struct sluice_syscall_slot *v = slot;
	if (sluice_sys_load_acquire(&slot->state) != sluice_slot_word(SLUICE_SLOT_FINISHED, seq))
		return 0;
	r->ret = (int64_t)v->args[0];
	r->err = v->args[1];
	/* Release: the result is read before the slot can be reused. */
	sluice_sys_store_release(&slot->state, sluice_slot_word(SLUICE_SLOT_FREE, sluice_next_seq(seq)));
#ifdef __CUDA_ARCH__
	sluice_sys_unlock(slot);
#endif
	return 1;
}

/* Wait for the blocking call rung with seq to finish; return its result
 * and free the slot. */
SLUICE_SYS_FN struct sluice_sysret sluice_sys_wait(struct sluice_syscall_slot *slot, uint32_t seq)
{
	struct sluice_sysret r = {0, 0};
	uint32_t ns = 0;
	while (!sluice_sys_poll(slot, seq, &r))
		sluice_sys_backoff(&ns);
	return r;
}

/* Make a call on slot: claim, populate, ring and, when flags has
 * SLUICE_SYS_FLAG_BLOCKING, wait for the result. A non-blocking call
 * returns {0, 0} as soon as it is rung. */
SLUICE_SYS_FN struct sluice_sysret sluice_syscall(struct sluice_syscall_slot *slot, uint16_t number, uint8_t flags,
                                                  uint8_t context, const uint64_t *args)
{
	struct sluice_sysret r = {0, 0};
	uint32_t seq = sluice_sys_claim(slot);
	sluice_sys_populate(slot, number, flags, context, args);
	sluice_sys_ring(slot, seq, flags);
	if (flags & SLUICE_SYS_FLAG_BLOCKING)
		r = sluice_sys_wait(slot, seq);
	return r;
}

/* ------------------------------------------------------------------------
 * Invocation granularity (GENESYS 4.1), GPU only. Each returns the call's
 * result to the work-items that get it and {0, 0} to the others.
 * ------------------------------------------------------------------------ */
#ifdef __CUDA_ARCH__

/* Linear ids, x fastest. */
SLUICE_DEV_FN uint32_t sluice_thread_in_block(void)
{
	return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
}
SLUICE_DEV_FN uint32_t sluice_block_threads(void) { return blockDim.x * blockDim.y * blockDim.z; }
SLUICE_DEV_FN uint32_t sluice_block_in_grid(void)
{
	return (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
}
SLUICE_DEV_FN uint32_t sluice_grid_blocks(void) { return gridDim.x * gridDim.y * gridDim.z; }

/* Work-item granularity: every work-item that calls makes its own call (on
 * its own slot, or one it shares and takes turns on). Strongly ordered by
 * nature: the work-item's earlier writes precede the call, and a blocking
 * call returns once the result is in. */
SLUICE_DEV_FN struct sluice_sysret sluice_syscall_work_item(struct sluice_syscall_slot *slot, uint16_t number,
                                                            uint8_t flags, uint8_t context, const uint64_t *args)
{
	return sluice_syscall(slot, number, flags, context, args);
}

/* Work-group granularity: work-item 0 of the block makes the call on
 * behalf of the block. Strong ordering (SLUICE_PROG_STRONG): every
 * work-item of the block must call this (it has barriers); the group's
 * writes before it precede the call (barrier, then the caller's
 * system-scope fence: a release is cumulative over what the barrier
 * ordered before it), and every work-item waits for the result and gets it
 * (through shared memory). Relaxed (SLUICE_PROG_RELAXED): no barrier; only
 * work-item 0 does anything, the others return {0, 0} at once. */
SLUICE_DEV_FN struct sluice_sysret sluice_syscall_work_group(struct sluice_syscall_slot *slot, uint16_t number,
                                                             uint8_t flags, uint8_t context, const uint64_t *args,
                                                             uint8_t ordering)
{
	__shared__ struct sluice_sysret sluice_group_ret;
	struct sluice_sysret r = {0, 0};
	int caller = sluice_thread_in_block() == 0;
	int strong = ordering == SLUICE_PROG_STRONG;
	if (strong)
		__syncthreads();
	if (caller) {
		if (strong)
			sluice_fence_system();
		r = sluice_syscall(slot, number, flags, context, args);
		if (strong)
			sluice_group_ret = r;
	}
	if (strong) {
		/* The next call's first barrier keeps the caller from
		 * overwriting sluice_group_ret before everyone read it. */
		__syncthreads();
		r = sluice_group_ret;
	}
	return r;
}

/* Kernel granularity: work-item 0 of work-group 0 makes the call; always
 * relaxed (a barrier over the whole grid can deadlock when the grid does
 * not fit on the GPU at once). Every other work-item returns {0, 0} at
 * once. */
SLUICE_DEV_FN struct sluice_sysret sluice_syscall_kernel(struct sluice_syscall_slot *slot, uint16_t number,
                                                         uint8_t flags, uint8_t context, const uint64_t *args)
{
	struct sluice_sysret r = {0, 0};
	if (sluice_block_in_grid() == 0 && sluice_thread_in_block() == 0)
		r = sluice_syscall(slot, number, flags, context, args);
	return r;
}

#endif /* __CUDA_ARCH__ */

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_SYSCALL_H */
