/*
 * sluice_kernels.cu - the GPU programs of ABI 1.1 (api/abi/kernels.go), which
 * make system calls through sluice_syscall.h. Each kernel takes its argument
 * blob as one by-value struct, so the LAUNCH blob is the parameter buffer
 * byte for byte. What each program does, exactly, is written in kernels.go;
 * the sim backend implements the same.
 *
 * Built with clang alone (no CUDA toolkit): see gen.sh.
 */

#ifndef __CUDACC__
/* clang -nocudainc: the little of the CUDA headers this file needs. */
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#include <__clang_cuda_builtin_vars.h>
#endif

#include "sluice_syscall.h"

#define SLUICE_AT_FDCWD ((uint64_t)(int64_t)-100)
#define SLUICE_O_RDONLY 0

/* The launch's view of the caller this work-item is, by granularity. */
struct caller {
	uint32_t id;      /* the caller's number (kernels.go: linear ids) */
	uint32_t n;       /* callers in the launch */
	int calls;        /* this work-item makes the calls */
	int group;        /* work-group granularity: the block takes part */
	int strong;       /* work-group granularity with strong ordering */
	struct sluice_syscall_slot *slot;
	struct sluice_sys_caller sc; /* the slot, its ready hint, owned or not */
};

/* at points c at slot first_slot + k % nslots; the launch's callers own
 * their slots when it says so and there are no more callers than slots. */
static __device__ void at(const struct sluice_prog_args *p, struct caller *c, uint32_t k)
{
	int owned = (p->ordering & SLUICE_PROG_OWN_SLOTS) && c->n <= p->nslots;
	c->sc = sluice_sys_caller_at((void *)p->sys, p->first_slot + k % p->nslots, owned);
	c->slot = c->sc.slot;
}

/* whoami fills c; 0 when the launch makes no call at all (no slots, an
 * unknown granularity). */
static __device__ int whoami(const struct sluice_prog_args *p, struct caller *c)
{
	uint32_t t = sluice_thread_in_block(), b = sluice_block_in_grid();
	if (p->nslots == 0)
		return 0;
	c->group = 0;
	c->strong = 0;
	switch (p->granularity) {
	case SLUICE_PROG_WORK_ITEM:
		c->id = b * sluice_block_threads() + t;
		c->n = sluice_grid_blocks() * sluice_block_threads();
		c->calls = 1;
		break;
	case SLUICE_PROG_WORK_GROUP:
		c->id = b;
		c->n = sluice_grid_blocks();
		c->calls = t == 0;
		c->group = 1;
		c->strong = (p->ordering & SLUICE_PROG_ORDER_MASK) == SLUICE_PROG_STRONG;
		break;
	case SLUICE_PROG_KERNEL:
		c->id = 0;
		c->n = 1;
		c->calls = b == 0 && t == 0;
		break;
	default:
		return 0;
	}
	at(p, c, c->id);
	return 1;
}

/* call makes one call as c: work-group granularity goes through the group
 * helper (every work-item of a strongly ordered group must get here and
 * gets the result), the others through the caller alone. */
static __device__ struct sluice_sysret call(struct caller *c, const struct sluice_prog_args *p, uint16_t nr,
                                            uint8_t flags, const uint64_t *args)
{
	struct sluice_sysret r = {0, 0};
	if (c->group)
		return sluice_syscall_work_group_as(&c->sc, nr, flags, p->context, args,
		                                    c->strong ? SLUICE_PROG_STRONG : SLUICE_PROG_RELAXED);
	if (c->calls)
		r = sluice_syscall_as(&c->sc, nr, flags, p->context, args);
	return r;
}

static __device__ uint64_t globaltimer(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* sluice_sys_one: one blocking call by caller 0; out = {ret, errno}. */
extern "C" __global__ void sluice_sys_one(struct sluice_sys_one_args a)
{
	struct caller c;
	struct sluice_sysret r;
	uint64_t args[SLUICE_SYS_ARG_COUNT];
	int i;
	if (!whoami(&a.prog, &c) || sluice_block_in_grid() != 0)
		return;
	if (!c.group && sluice_thread_in_block() != 0)
		return;
	c.calls = sluice_thread_in_block() == 0;
	c.n = 1;
	at(&a.prog, &c, 0);
	for (i = 0; i < SLUICE_SYS_ARG_COUNT; i++)
		args[i] = a.args[i];
	r = call(&c, &a.prog, (uint16_t)a.number, (uint8_t)(a.prog.flags | SLUICE_SYS_FLAG_BLOCKING), args);
	if (c.calls) {
		volatile uint64_t *out = (volatile uint64_t *)a.prog.out;
		out[0] = (uint64_t)r.ret;
		out[1] = r.err;
	}
}

/* sluice_sys_null: iterations null calls per caller, each one's round trip
 * in ns at out[caller * iterations + i]; through the request ring when the
 * blob names its claim counter. */
extern "C" __global__ void sluice_sys_null(struct sluice_sys_null_args a)
{
	const struct sluice_prog_args p = a.prog;
	struct caller c;
	uint32_t i;
	if (!whoami(&p, &c) || (!c.calls && !c.strong))
		return;
	if (a.ring && a.ring_slots)
		sluice_sys_caller_use_ring(&c.sc, (uint64_t *)a.ring, a.ring_slots);
	for (i = 0; i < p.iterations; i++) {
		uint64_t t0 = globaltimer(), dt;
		call(&c, &p, SLUICE_SYS_NULL, p.flags, 0);
		dt = globaltimer() - t0;
		if (c.calls)
			((volatile uint32_t *)p.out)[(uint64_t)c.id * p.iterations + i] =
			    dt > 0xffffffffu ? 0xffffffffu : (uint32_t)dt;
	}
}

/* bytesum is the sum of the bytes of x. */
static __device__ uint64_t bytesum(uint64_t x)
{
	x = (x & 0x00ff00ff00ff00ffull) + ((x >> 8) & 0x00ff00ff00ff00ffull);
	x = (x & 0x0000ffff0000ffffull) + ((x >> 16) & 0x0000ffff0000ffffull);
	return (x & 0xffffffffull) + (x >> 32);
}

/* sum adds up b[0, n) as work-item t of T: the aligned middle in 8-byte
 * words shared out round robin, the ragged ends by work-item 0. */
static __device__ uint64_t sum(const uint8_t *b, uint64_t n, uint32_t t, uint32_t T)
{
	uint64_t s = 0, i, head = (8 - ((uintptr_t)b & 7)) & 7, words;
	if (head > n)
		head = n;
	words = (n - head) / 8;
	if (t == 0) {
		for (i = 0; i < head; i++)
			s += b[i];
		for (i = head + words * 8; i < n; i++)
			s += b[i];
	}
	for (i = t; i < words; i += T)
		s += bytesum(((const uint64_t *)(b + head))[i]);
	return s;
}

/* sluice_pread_sweep: the callers pread the file chunk by chunk, each into
 * its own buffer; out per caller = {bytes, failed calls, byte sum}. */
extern "C" __global__ void sluice_pread_sweep(struct sluice_sweep_args a)
{
	__shared__ unsigned long long group_sum;
	const struct sluice_prog_args *p = &a.prog;
	struct caller c;
	uint64_t chunks, k, bufoff, bytes = 0, failed = 0, total = 0;
	uint32_t pass, passes = p->iterations ? p->iterations : 1;
	uint32_t t = 0, T = 1;
	const uint8_t *buf;
	if (!whoami(p, &c) || (!c.calls && !c.strong))
		return;
	if (c.strong) {
		t = sluice_thread_in_block();
		T = sluice_block_threads();
	}
	chunks = a.chunk ? a.file_size / a.chunk + (a.file_size % a.chunk != 0) : 0;
	bufoff = a.buf + (uint64_t)c.id * a.chunk;
	buf = (const uint8_t *)a.heap + bufoff;
	if (c.strong && t == 0)
		group_sum = 0;
	for (pass = 0; pass < passes; pass++) {
		for (k = c.id; k < chunks; k += c.n) {
			uint64_t off = k * a.chunk, len = a.file_size - off < a.chunk ? a.file_size - off : a.chunk;
			uint64_t args[SLUICE_SYS_ARG_COUNT] = {a.fd, bufoff, len, off, 0, 0};
			struct sluice_sysret r = call(&c, p, SLUICE_SYS_PREAD64, (uint8_t)(p->flags | SLUICE_SYS_FLAG_BLOCKING), args);
			uint64_t n = r.err == 0 && r.ret > 0 ? (uint64_t)r.ret : 0;
			if (n > a.chunk)
				n = a.chunk; /* never read past the buffer */
			if (!c.strong) {
				total += sum(buf, n, 0, 1);
			} else {
				__atomic_fetch_add(&group_sum, (unsigned long long)sum(buf, n, t, T), __ATOMIC_RELAXED);
				__syncthreads();
				if (t == 0) {
					total += group_sum;
					group_sum = 0; /* before the next call's first barrier */
				}
			}
			if (r.err != 0)
				failed++;
			bytes += n;
		}
	}
	if (c.calls) {
		volatile uint64_t *out = (volatile uint64_t *)a.prog.out + (uint64_t)c.id * 3;
		out[0] = bytes;
		out[1] = failed;
		out[2] = total;
	}
}

static __device__ int space(uint8_t ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); }

/* wordstarts counts the bytes of b[0, n) that start a word, as work-item t
 * of T (round robin, so that neighbours read neighbouring bytes); in_word
 * says whether the byte before b[0] (the previous chunk's last) is in a
 * word. */
static __device__ uint64_t wordstarts(const uint8_t *b, uint64_t n, int in_word, uint32_t t, uint32_t T)
{
	uint64_t i, w = 0;
	for (i = t; i < n; i += T)
		if (!space(b[i]) && (i == 0 ? !in_word : space(b[i - 1])))
			w++;
	return w;
}

/* skip_path returns the heap offset of the path after the one at off. */
static __device__ uint64_t skip_path(const uint8_t *heap, uint64_t off)
{
	uint64_t end = off + SLUICE_PATH_MAX;
	while (off < end && heap[off] != 0)
		off++;
	return off + 1;
}

struct wc_state {
	uint64_t words, bytes, err;
};

/* count_file counts one open file into s: pread chunk by chunk until EOF
 * or a failure. Every work-item of a strongly ordered group runs it. */
static __device__ void count_file(const struct sluice_wc_args *a, struct caller *c, uint64_t fd,
                                  struct wc_state *s, uint32_t t, uint32_t T)
{
	__shared__ unsigned long long group_words;
	__shared__ int group_in_word;
	const uint8_t *heap = (const uint8_t *)a->heap;
	uint64_t bufoff = a->buf + (uint64_t)c->id * a->chunk, off = 0;
	int in_word = 0;
	if (t == 0) {
		/* Before the first call's first barrier. */
		group_words = 0;
		group_in_word = 0;
	}
	for (;;) {
		uint64_t args[SLUICE_SYS_ARG_COUNT] = {fd, bufoff, a->chunk, off, 0, 0};
		struct sluice_sysret r = call(c, &a->prog, SLUICE_SYS_PREAD64,
		                              (uint8_t)(a->prog.flags | SLUICE_SYS_FLAG_BLOCKING), args);
		uint64_t n;
		if (r.err != 0) {
			if (t == 0 && s->err == 0)
				s->err = r.err;
			return;
		}
		if (r.ret <= 0)
			return;
		n = (uint64_t)r.ret < a->chunk ? (uint64_t)r.ret : a->chunk;
		if (c->strong) {
			__atomic_fetch_add(&group_words,
			                   (unsigned long long)wordstarts(heap + bufoff, n, group_in_word, t, T),
			                   __ATOMIC_RELAXED);
			__syncthreads();
		} else {
			group_words = wordstarts(heap + bufoff, n, in_word, 0, 1);
		}
		if (t == 0) {
			s->words += group_words;
			group_words = 0; /* before the next call's first barrier */
			in_word = !space(heap[bufoff + n - 1]);
			group_in_word = in_word;
		}
		s->bytes += n;
		off += n;
	}
}

/* sluice_wordcount: work-group g counts the words of files g, g + groups,
 * ...; out per work-group = {words, bytes, first errno}. */
extern "C" __global__ void sluice_wordcount(struct sluice_wc_args a)
{
	const struct sluice_prog_args *p = &a.prog;
	const uint8_t *heap = (const uint8_t *)a.heap;
	struct caller c;
	struct wc_state s = {0, 0, 0};
	uint32_t t = sluice_thread_in_block(), T = 1, g = sluice_block_in_grid(), f, first, stride;
	uint64_t path = a.paths, pathidx = 0;
	uint8_t flags = (uint8_t)(p->flags | SLUICE_SYS_FLAG_BLOCKING);
	if (!whoami(p, &c))
		return;
	/* The buffers are per group: work-item granularity counts as
	 * work-group; kernel granularity is work-group 0 counting alone. */
	if (p->granularity == SLUICE_PROG_WORK_ITEM) {
		c.id = g;
		c.n = sluice_grid_blocks();
		c.calls = t == 0;
		c.group = 1;
		c.strong = (p->ordering & SLUICE_PROG_ORDER_MASK) == SLUICE_PROG_STRONG;
		at(p, &c, g);
	}
	first = p->granularity == SLUICE_PROG_KERNEL ? 0 : g;
	stride = c.n;
	if (!c.calls && !c.strong) {
		/* Relaxed: the caller counts alone. A kernel-granularity launch's
		 * other groups still own an out record: zeros. */
		if (p->granularity == SLUICE_PROG_KERNEL && t == 0) {
			volatile uint64_t *out = (volatile uint64_t *)p->out + (uint64_t)g * 3;
			out[0] = out[1] = out[2] = 0;
		}
		return;
	}
	if (c.strong)
		T = sluice_block_threads();
	for (f = first; f < a.npaths; f += stride) {
		uint64_t args[SLUICE_SYS_ARG_COUNT] = {SLUICE_AT_FDCWD, 0, SLUICE_O_RDONLY, 0, 0, 0};
		struct sluice_sysret r;
		if (t == 0)
			for (; pathidx < f; pathidx++)
				path = skip_path(heap, path);
		args[1] = path;
		r = call(&c, p, SLUICE_SYS_OPENAT, flags, args);
		if (r.err != 0) {
			if (t == 0 && s.err == 0)
				s.err = r.err;
			continue;
		}
		count_file(&a, &c, (uint64_t)r.ret, &s, t, T);
		args[0] = (uint64_t)r.ret;
		args[1] = 0;
		args[2] = 0;
		r = call(&c, p, SLUICE_SYS_CLOSE, flags, args);
		if (r.err != 0 && t == 0 && s.err == 0)
			s.err = r.err;
	}
	if (t == 0) {
		volatile uint64_t *out = (volatile uint64_t *)p->out + (uint64_t)g * 3;
		out[0] = s.words;
		out[1] = s.bytes;
		out[2] = s.err;
	}
}

/* sluice_sys_null_phases: a diagnostic, not one of the ABI's programs (the
 * sim has no such kernel). Work-item granularity only: each work-item makes
 * iterations blocking null calls on its slot and times each phase on
 * %globaltimer; out per call (SLUICE_PHASES_REC bytes): u64 t0 (before the
 * claim), then u32 ns since t0 at: the claim done, the fields written, READY
 * stored (after its fence), FINISHED seen, the slot freed (and unlocked);
 * then u32 polls of the state word until FINISHED. mode picks variants of
 * the library's path, to see what each step costs:
 *   PH_OWNED     no cookie lock (the launch's callers must not share slots)
 *   PH_KNOWNSEQ  with PH_OWNED: read the state word only at the first claim
 *   PH_SPIN      poll for FINISHED without nanosleep
 *   PH_FREE_RLX  free the slot with a volatile store (the library's
 *                sluice_sys_free stores relaxed after the result's
 *                fence; PH_OLDRESULT frees with a release store)
 *   PH_NOHINT    set no ready hint (the host finds the call by a full scan)
 *   PH_OLDRESULT read the result the old way: the state word (acquire),
 *                then ret and errno (args[0], args[1]); otherwise one
 *                16-byte load (sluice_sys_result)
 */
#define PH_OWNED 1u
#define PH_KNOWNSEQ 2u
#define PH_SPIN 4u
#define PH_FREE_RLX 8u
#define PH_NOHINT 16u
#define PH_OLDRESULT 32u
#define SLUICE_PHASES_REC 32

struct sluice_null_phases_args {
	struct sluice_prog_args prog;
	uint32_t mode;
	uint32_t pad;
};

extern "C" __global__ void sluice_sys_null_phases(struct sluice_null_phases_args a)
{
	struct caller c;
	uint32_t i, seq = 0, mode = a.mode;
	int have_seq = 0;
	uint8_t flags = (uint8_t)(a.prog.flags | SLUICE_SYS_FLAG_BLOCKING);
	if (a.prog.granularity != SLUICE_PROG_WORK_ITEM || !whoami(&a.prog, &c))
		return;
	for (i = 0; i < a.prog.iterations; i++) {
		struct sluice_syscall_slot *s = c.slot;
		volatile struct sluice_syscall_slot *v = s;
		volatile uint32_t *rec;
		uint64_t t0 = globaltimer(), t1, t2, t3, t4, t5;
		uint32_t polls = 0, ns = 0, w;
		if (mode & PH_OWNED) {
			if (!(mode & PH_KNOWNSEQ) || !have_seq) {
				for (;;) {
					w = sluice_sys_load_acquire(&s->state);
					if (sluice_slot_state(w) == SLUICE_SLOT_FREE)
						break;
					sluice_sys_backoff(&ns);
				}
				seq = sluice_slot_seq(w);
			}
			v->state = sluice_slot_word(SLUICE_SLOT_POPULATING, seq);
		} else {
			seq = sluice_sys_claim(s);
		}
		t1 = globaltimer();
		sluice_sys_populate(s, SLUICE_SYS_NULL, flags, a.prog.context, 0);
		t2 = globaltimer();
		sluice_sys_store_release(&s->state, sluice_slot_word(SLUICE_SLOT_READY, seq));
		if (!(mode & PH_NOHINT))
			*(volatile uint8_t *)((uint8_t *)a.prog.sys + SLUICE_SYSCALL_READY_MAP_OFF + a.prog.first_slot +
			                      c.id % a.prog.nslots) = 1;
		t3 = globaltimer();
		ns = 0;
		for (;;) {
			struct sluice_sysret r;
			polls++;
			if (mode & PH_OLDRESULT) {
				if (sluice_sys_load_acquire(&s->state) == sluice_slot_word(SLUICE_SLOT_FINISHED, seq))
					break;
			} else if (sluice_sys_result(s, seq, &r)) {
				w = (uint32_t)r.ret | (uint32_t)r.err;
				break;
			}
			if (!(mode & PH_SPIN))
				sluice_sys_backoff(&ns);
		}
		t4 = globaltimer();
		if (mode & PH_OLDRESULT)
			w = (uint32_t)v->args[0] | (uint32_t)v->args[1];
		if (mode & PH_FREE_RLX)
			v->state = sluice_slot_word(SLUICE_SLOT_FREE, sluice_next_seq(seq)) | (w & 0); /* after the reads */
		else if (mode & PH_OLDRESULT)
			sluice_sys_store_release(&s->state, sluice_slot_word(SLUICE_SLOT_FREE, sluice_next_seq(seq)));
		else
			sluice_sys_free(s, sluice_next_seq(seq)); /* as the library frees */
		if (!(mode & PH_OWNED))
			sluice_sys_unlock(s);
		seq = sluice_next_seq(seq);
		have_seq = 1;
		t5 = globaltimer();
		rec = (volatile uint32_t *)((uint8_t *)a.prog.out + ((uint64_t)c.id * a.prog.iterations + i) * SLUICE_PHASES_REC);
		rec[0] = (uint32_t)t0;
		rec[1] = (uint32_t)(t0 >> 32);
		rec[2] = (uint32_t)(t1 - t0);
		rec[3] = (uint32_t)(t2 - t0);
		rec[4] = (uint32_t)(t3 - t0);
		rec[5] = (uint32_t)(t4 - t0);
		rec[6] = (uint32_t)(t5 - t0);
		rec[7] = polls | (w & 0);
	}
}
