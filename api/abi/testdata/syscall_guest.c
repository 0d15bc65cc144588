/*
 * A CPU guest for TestCSyscallProtocol: threads acting as GPU work-items make
 * calls through sluice_syscall.h on a syscall area the Go test maps too and
 * serves.
 *
 *   syscall_guest FILE THREADS CALLS SLOTS [OWNED [AREA_SLOTS]]
 *
 * FILE holds the syscall area (bitmap page, then the slots). Thread t makes
 * CALLS calls on slot t % SLOTS, so threads share slots and take turns. Call
 * i of thread t has number SLUICE_SYS_NULL, args {t, i, expected errno, 0,
 * 0, 0xa5a5...}, cookie t << 32 | i; every fourth call (i % 4 == 3) is
 * non-blocking. The host answers ret = t * 1000000 + i and errno args[2].
 * Thread 0 uses the step-by-step functions and polls; the others
 * sluice_syscall. With OWNED 1 (THREADS <= SLOTS) every thread calls through
 * a caller handle that owns its slot and sets the ready hint
 * (sluice_sys_claim_as, _ring_as, _wait_as). With OWNED 2 they call through
 * the request ring instead (sluice_sys_caller_use_ring, sluice_syscall_as;
 * the area then has AREA_SLOTS slots and the ring after them; the cookie is
 * not carried). Exit status 0 when every blocking call got its own answer.
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Threads outnumber the cores: a spinning caller lets the others run. */
#define SLUICE_CPU_RELAX() sched_yield()
#include "sluice_syscall.h"

static void *sys_area;
static uint32_t ncalls, nslots, owned, area_slots;
static uint64_t ring_ctr; /* the claim counter every ring caller shares */

struct worker {
	pthread_t th;
	uint32_t id;
	uint32_t bad;
};

static uint64_t want_errno(uint32_t t, uint32_t i) { return (t + i) % 5 == 0 ? SLUICE_ERRNO_NOENT : 0; }

static void *work(void *arg)
{
	struct worker *w = (struct worker *)arg;
	struct sluice_syscall_slot *slot = sluice_sys_slot(sys_area, w->id % nslots);
	struct sluice_sys_caller c = sluice_sys_caller_at(sys_area, w->id % nslots, 1);
	uint32_t i;
	for (i = 0; i < ncalls; i++) {
		uint64_t args[SLUICE_SYS_ARG_COUNT] = {w->id, i, want_errno(w->id, i), 0, 0, UINT64_C(0xa5a5a5a5a5a5a5a5)};
		uint8_t flags = (uint8_t)(i % 4 == 3 ? 0 : SLUICE_SYS_FLAG_BLOCKING);
		struct sluice_sysret r = {0, 0};
		if (owned == 2) {
			sluice_sys_caller_use_ring(&c, &ring_ctr, area_slots);
			r = sluice_syscall_as(&c, SLUICE_SYS_NULL, flags, (uint8_t)(w->id % 3), args);
		} else if (owned) {
			uint32_t seq = sluice_sys_claim_as(&c);
			sluice_sys_populate(slot, SLUICE_SYS_NULL, flags, (uint8_t)(w->id % 3), args);
			slot->cookie = ((uint64_t)w->id << 32) | i;
			sluice_sys_ring_as(&c, seq, flags);
			if (flags & SLUICE_SYS_FLAG_BLOCKING)
				r = sluice_sys_wait_as(&c, seq);
		} else if (w->id == 0) {
			uint32_t seq, ns = 0;
			while (!sluice_sys_try_claim(slot, &seq))
				sluice_sys_backoff(&ns);
			sluice_sys_populate(slot, SLUICE_SYS_NULL, flags, (uint8_t)(w->id % 3), args);
			slot->cookie = ((uint64_t)w->id << 32) | i;
			sluice_sys_ring(slot, seq, flags);
			if (flags & SLUICE_SYS_FLAG_BLOCKING)
				while (!sluice_sys_poll(slot, seq, &r))
					sched_yield();
		} else {
			/* The cookie is the guest's: set it before the ring. */
			uint32_t seq = sluice_sys_claim(slot);
			sluice_sys_populate(slot, SLUICE_SYS_NULL, flags, (uint8_t)(w->id % 3), args);
			slot->cookie = ((uint64_t)w->id << 32) | i;
			sluice_sys_ring(slot, seq, flags);
			if (flags & SLUICE_SYS_FLAG_BLOCKING)
				r = sluice_sys_wait(slot, seq);
		}
		if (!(flags & SLUICE_SYS_FLAG_BLOCKING))
			continue;
		if (r.ret != (int64_t)w->id * 1000000 + i || r.err != want_errno(w->id, i)) {
			fprintf(stderr, "thread %u call %u: ret %lld errno %llu\n", w->id, i, (long long)r.ret,
			        (unsigned long long)r.err);
			w->bad++;
		}
	}
	return NULL;
}

/* one_call makes a last call with sluice_syscall on slot 0, after the
 * threads are done: the convenience path end to end. */
static int one_call(void)
{
	uint64_t args[SLUICE_SYS_ARG_COUNT] = {999, 0, 0, 0, 0, 0};
	struct sluice_sysret r =
	    sluice_syscall(sluice_sys_slot(sys_area, 0), SLUICE_SYS_NULL, SLUICE_SYS_FLAG_BLOCKING, 0, args);
	if (r.ret != 999 * 1000000 || r.err != 0) {
		fprintf(stderr, "last call: ret %lld errno %llu\n", (long long)r.ret, (unsigned long long)r.err);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct worker *ws;
	uint32_t n, t, bad = 0;
	size_t size;
	int fd;
	if (argc < 5 || argc > 7) {
		fprintf(stderr, "usage: %s FILE THREADS CALLS SLOTS [OWNED [AREA_SLOTS]]\n", argv[0]);
		return 2;
	}
	n = (uint32_t)strtoul(argv[2], NULL, 10);
	ncalls = (uint32_t)strtoul(argv[3], NULL, 10);
	nslots = (uint32_t)strtoul(argv[4], NULL, 10);
	owned = argc >= 6 ? (uint32_t)strtoul(argv[5], NULL, 10) : 0;
	area_slots = argc == 7 ? (uint32_t)strtoul(argv[6], NULL, 10) : nslots;
	if ((owned && n > nslots) || area_slots < nslots)
		return 2;
	size = SLUICE_SYSCALL_SLOTS_OFF + (size_t)nslots * SLUICE_SYSCALL_SLOT_SIZE;
	if (owned == 2)
		size = (size_t)sluice_syscall_ring_off(area_slots) + (size_t)area_slots * SLUICE_SYSCALL_RING_ENTRY_SIZE;
	fd = open(argv[1], O_RDWR);
	if (fd < 0 || n == 0 || nslots == 0) {
		perror(argv[1]);
		return 2;
	}
	sys_area = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (sys_area == MAP_FAILED) {
		perror("mmap");
		return 2;
	}
	ws = (struct worker *)calloc(n, sizeof *ws);
	if (ws == NULL)
		return 2;
	for (t = 0; t < n; t++) {
		ws[t].id = t;
		if (pthread_create(&ws[t].th, NULL, work, &ws[t]) != 0) {
			perror("pthread_create");
			return 2;
		}
	}
	for (t = 0; t < n; t++) {
		pthread_join(ws[t].th, NULL);
		bad += ws[t].bad;
	}
	free(ws);
	bad += (uint32_t)one_call();
	printf("%u bad\n", bad);
	return bad == 0 ? 0 : 1;
}
