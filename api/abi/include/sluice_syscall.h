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
 * ends at the ring: the host frees the slot and discards the result.
 *
 * A caller handle (struct sluice_sys_caller, sluice_sys_caller_at) adds two
 * things, through the *_as functions and sluice_syscall_as:
 *   - the ready hint (SLUICE_FEATURE_READY_MAP): after READY the caller
 *     stores 1 to its slot's byte of the ready map, so that the host finds
 *     the call without scanning every state word (without the hint the call
 *     is found by the host's periodic full scan, later);
 *   - owned slots (SLUICE_PROG_OWN_SLOTS): a caller that alone uses its
 *     slot takes no lock and does not read the state word at each claim: it
 *     waits for FREE once, keeps the sequence number, and waits again only
 *     after a non-blocking call (the host frees that slot).
 *
 * The result (SLUICE_FEATURE_RESULT_WORD, which this library needs of the
 * host unless SLUICE_SYS_LEGACY_RESULT is defined): a FINISHED slot holds
 * the errno at SLUICE_SYS_FIN_ERRNO, stored with the state word, so a GPU
 * polls with one 16-byte load of bytes 0..15 (state, errno, ret: one PCIe
 * read, served from one coherent copy of the line the host wrote ret to
 * before it swapped the state in) and, once FINISHED, an acquire fence
 * (what the call wrote elsewhere, a pread's bytes, is visible after it).
 * A CPU loads bytes 0..7 with acquire ordering, then ret.
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

/* Read the result of the call rung with seq if the slot is FINISHED|seq:
 * 1 with *r filled (and, on a GPU, an acquire fence done), else 0. The slot
 * is left as it is. */
SLUICE_SYS_FN int sluice_sys_result(struct sluice_syscall_slot *slot, uint32_t seq, struct sluice_sysret *r)
{
	volatile struct sluice_syscall_slot *v = slot;
#if defined(SLUICE_SYS_LEGACY_RESULT)
	if (sluice_sys_load_acquire(&slot->state) != sluice_slot_word(SLUICE_SLOT_FINISHED, seq))
		return 0;
	r->ret = (int64_t)v->args[0];
	r->err = v->args[1];
#elif defined(__CUDA_ARCH__)
	uint64_t w, ret;
	asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];" : "=l"(w), "=l"(ret) : "l"(slot) : "memory");
	if ((uint32_t)w != sluice_slot_word(SLUICE_SLOT_FINISHED, seq))
		return 0;
	/* Acquire: with the load above, what the host wrote before FINISHED. */
	asm volatile("fence.acq_rel.sys;" ::: "memory");
	r->ret = (int64_t)ret;
	r->err = w >> 32;
	(void)v;
#else
	uint64_t w = __atomic_load_n((uint64_t *)(void *)slot, __ATOMIC_ACQUIRE);
	if ((uint32_t)w != sluice_slot_word(SLUICE_SLOT_FINISHED, seq))
		return 0;
	r->ret = (int64_t)v->args[0];
	r->err = w >> 32;
#endif
	return 1;
}

/* Free a slot whose result sluice_sys_result just read: FREE|next. The
 * result is read before the slot can be reused: on a GPU the result's
 * acquire fence (fence.acq_rel.sys) already orders those reads before any
 * later store, so a relaxed store will do (a release store there paid a
 * second system fence, ~0.6 us a call on an H100); on a CPU, and with the
 * legacy result read (an acquire load, then plain loads), a release store. */
SLUICE_SYS_FN void sluice_sys_free(struct sluice_syscall_slot *slot, uint32_t next)
{
#if defined(__CUDA_ARCH__) && !defined(SLUICE_SYS_LEGACY_RESULT)
	asm volatile("st.relaxed.sys.u32 [%0], %1;" ::"l"(&slot->state), "r"(sluice_slot_word(SLUICE_SLOT_FREE, next))
	             : "memory");
#else
	sluice_sys_store_release(&slot->state, sluice_slot_word(SLUICE_SLOT_FREE, next));
#endif
}

/* Check once whether the blocking call rung with seq has finished. If so,
 * store its result in *r, free the slot (FREE|seq+1) and return 1; else
 * return 0 (call it again later: the GPU can do other work in between). */
SLUICE_SYS_FN int sluice_sys_poll(struct sluice_syscall_slot *slot, uint32_t seq, struct sluice_sysret *r)
{
	if (!sluice_sys_result(slot, seq, r))
		return 0;
	sluice_sys_free(slot, sluice_next_seq(seq));
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
 * Caller handles: the ready hint and owned slots
 * ------------------------------------------------------------------------ */

/* One caller's view of its slot. */
struct sluice_sys_caller {
	struct sluice_syscall_slot *slot;
	uint8_t *hint;  /* the slot's ready-map byte; NULL: set no hint */
	uint32_t seq;   /* owned: the sequence number of the caller's next call */
	uint8_t owned;  /* the caller alone uses the slot (SLUICE_PROG_OWN_SLOTS) */
	uint8_t known;  /* owned: the slot is known to be FREE|seq */
	uint8_t pad[2];
	/* The request ring (sluice_sys_caller_use_ring); ring_ctr NULL: the
	 * calls go through the slot. */
	uint64_t *ring_ctr;  /* the VM's claim counter */
	uint8_t *sys;        /* the area */
	uint32_t index;      /* the slot's index */
	uint32_t ring_slots; /* the area's slot count: the ring's length */
};

/* The caller of slot i of the area at sys, with its ready hint; owned:
 * no other caller uses the slot while this one does. */
SLUICE_SYS_FN struct sluice_sys_caller sluice_sys_caller_at(void *sys, uint32_t i, int owned)
{
	struct sluice_sys_caller c;
	c.slot = sluice_sys_slot(sys, i);
	c.hint = (uint8_t *)sys + SLUICE_SYSCALL_READY_MAP_OFF + i;
	c.seq = 0;
	c.owned = owned ? 1 : 0;
	c.known = 0;
	c.pad[0] = c.pad[1] = 0;
	c.ring_ctr = 0;
	c.sys = (uint8_t *)sys;
	c.index = i;
	c.ring_slots = 0;
	return c;
}

/* Make c's calls through the request ring of its area, which has slots
 * slots, with the VM's claim counter ctr (SLUICE_RELOC_SYSCALL_RING on a GPU).
 * The host must announce SLUICE_FEATURE_SYSCALL_RING. */
SLUICE_SYS_FN void sluice_sys_caller_use_ring(struct sluice_sys_caller *c, uint64_t *ctr, uint32_t slots)
{
	c->ring_ctr = ctr;
	c->ring_slots = slots;
}

/* Claim a position of the request ring: fetch-and-add on the claim counter
 * (on a GPU in device memory, at GPU scope: only GPU threads add to it). */
SLUICE_SYS_FN uint64_t sluice_sys_ring_claim(uint64_t *ctr)
{
#ifdef __CUDA_ARCH__
	uint64_t pos;
	asm volatile("atom.relaxed.gpu.add.u64 %0, [%1], 1;" : "=l"(pos) : "l"(ctr) : "memory");
	return pos;
#else
	return __atomic_fetch_add(ctr, 1, __ATOMIC_RELAXED);
#endif
}

/* Hand the call of c's claimed slot (sequence seq) to the host through the
 * ring: the slot's first 8 bytes become PROCESSING|seq and the call word
 * (what the host's result compare-and-swaps from), then a position is
 * claimed, its entry written and its tag stored last, with release ordering. */
SLUICE_SYS_FN void sluice_sys_ring_publish(struct sluice_sys_caller *c, uint32_t seq, uint16_t number, uint8_t flags,
                                           uint8_t context, const uint64_t *args)
{
	uint32_t cw = (uint32_t)number | (uint32_t)flags << 16 | (uint32_t)context << 24;
	uint64_t pos;
	void *e;
	volatile uint64_t *w;
	int i;
	*(volatile uint64_t *)(void *)c->slot = (uint64_t)sluice_slot_word(SLUICE_SLOT_PROCESSING, seq) | (uint64_t)cw << 32;
	pos = sluice_sys_ring_claim(c->ring_ctr);
	e = sluice_syscall_ring_entry_in(c->sys, c->ring_slots, pos);
	/* The entry as words: bytes 4..7 (number, flags, context), the
	 * arguments, then slot and seq in one store each; the tag last. */
	w = (volatile uint64_t *)e;
	((volatile uint32_t *)e)[1] = cw;
	for (i = 0; i < SLUICE_SYS_ARG_COUNT; i++)
		w[1 + i] = args ? args[i] : 0;
	w[7] = (uint64_t)c->index | (uint64_t)seq << 32;
	sluice_sys_store_release((uint32_t *)e, (uint32_t)(pos + 1));
}

/* An owner's sequence number for its next call: the slot's, read once it
 * is FREE, when the owner does not know it. */
SLUICE_SYS_FN uint32_t sluice_sys_owned_seq(struct sluice_sys_caller *c)
{
	uint32_t w, ns = 0;
	if (!c->known) {
		for (;;) {
			w = sluice_sys_load_acquire(&c->slot->state);
			if (sluice_slot_state(w) == SLUICE_SLOT_FREE)
				break;
			sluice_sys_backoff(&ns);
		}
		c->seq = sluice_slot_seq(w);
		c->known = 1;
	}
	return c->seq;
}

/* Take c's slot (sluice_sys_claim); an owner waits for FREE only when it
 * does not know the slot's sequence number, and takes no lock. Returns the
 * sequence number. */
SLUICE_SYS_FN uint32_t sluice_sys_claim_as(struct sluice_sys_caller *c)
{
	if (!c->owned)
		return sluice_sys_claim(c->slot);
	sluice_sys_owned_seq(c);
	/* The owner alone writes the word while it is FREE. */
	((volatile struct sluice_syscall_slot *)c->slot)->state = sluice_slot_word(SLUICE_SLOT_POPULATING, c->seq);
	return c->seq;
}

/* Ring c's claimed slot (sluice_sys_ring), then set its ready hint. */
SLUICE_SYS_FN void sluice_sys_ring_as(struct sluice_sys_caller *c, uint32_t seq, uint8_t flags)
{
	if (c->owned) {
		sluice_sys_store_release(&c->slot->state, sluice_slot_word(SLUICE_SLOT_READY, seq));
		/* The host frees a non-blocking call's slot: wait for it next
		 * time. */
		if (!(flags & SLUICE_SYS_FLAG_BLOCKING))
			c->known = 0;
	} else {
		sluice_sys_ring(c->slot, seq, flags);
	}
	if (c->hint)
		*(volatile uint8_t *)c->hint = 1;
}

/* Check once for the result of c's blocking call rung with seq
 * (sluice_sys_poll); an owner frees the slot without a lock to drop and
 * knows the next sequence number. */
SLUICE_SYS_FN int sluice_sys_poll_as(struct sluice_sys_caller *c, uint32_t seq, struct sluice_sysret *r)
{
	if (!c->owned)
		return sluice_sys_poll(c->slot, seq, r);
	if (!sluice_sys_result(c->slot, seq, r))
		return 0;
	c->seq = sluice_next_seq(seq);
	sluice_sys_free(c->slot, c->seq);
	return 1;
}

/* Wait for the result of c's blocking call rung with seq. */
SLUICE_SYS_FN struct sluice_sysret sluice_sys_wait_as(struct sluice_sys_caller *c, uint32_t seq)
{
	struct sluice_sysret r = {0, 0};
	uint32_t ns = 0;
	while (!sluice_sys_poll_as(c, seq, &r))
		sluice_sys_backoff(&ns);
	return r;
}

/* sluice_syscall as caller c. */
SLUICE_SYS_FN struct sluice_sysret sluice_syscall_as(struct sluice_sys_caller *c, uint16_t number, uint8_t flags,
                                                     uint8_t context, const uint64_t *args)
{
	struct sluice_sysret r = {0, 0};
	/* An owner going through the ring needs no POPULATING: its next store
	 * to the slot is PROCESSING. */
	uint32_t seq = c->ring_ctr && c->owned ? sluice_sys_owned_seq(c) : sluice_sys_claim_as(c);
	if (c->ring_ctr) {
		sluice_sys_ring_publish(c, seq, number, flags, context, args);
		if (!(flags & SLUICE_SYS_FLAG_BLOCKING)) {
			/* The host frees the slot once it read the entry. */
			if (c->owned)
				c->known = 0;
#ifdef __CUDA_ARCH__
			else
				sluice_sys_unlock(c->slot);
#endif
		}
	} else {
		sluice_sys_populate(c->slot, number, flags, context, args);
		sluice_sys_ring_as(c, seq, flags);
	}
	if (flags & SLUICE_SYS_FLAG_BLOCKING)
		r = sluice_sys_wait_as(c, seq);
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
SLUICE_DEV_FN struct sluice_sysret sluice_syscall_work_group_as(struct sluice_sys_caller *c, uint16_t number,
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
		r = sluice_syscall_as(c, number, flags, context, args);
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

/* sluice_syscall_work_group_as with a plain shared slot and no hint. */
SLUICE_DEV_FN struct sluice_sysret sluice_syscall_work_group(struct sluice_syscall_slot *slot, uint16_t number,
                                                             uint8_t flags, uint8_t context, const uint64_t *args,
                                                             uint8_t ordering)
{
	struct sluice_sys_caller c = {slot, 0, 0, 0, 0, {0, 0}, 0, 0, 0, 0};
	return sluice_syscall_work_group_as(&c, number, flags, context, args, ordering);
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
