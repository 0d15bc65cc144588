package shm

// Cache-line hints, for a loop that streams through shared memory another
// core or a device writes: they change when a line moves, never what a
// load sees, and a hint past the region is dropped rather than issued (a
// prefetch does not fault, but a hint is no reason to touch other memory).
//
// Why the syscall poller wants them: a load used as a prefetch stalls the
// core's retirement until its line comes (tens of nanoseconds for a line a
// GPU just wrote over PCIe), where a prefetch instruction retires at once
// and the line arrives while the loop works on the lines before it.

// Prefetch asks for the line holding off, to read soon.
func (r *Region) Prefetch(off uint64) {
	if off < uint64(len(r.b)) {
		prefetch(addr(r.b) + uintptr(off))
	}
}

// PrefetchW asks for the line holding off in the exclusive state, to write
// soon: the request for ownership that the first store would wait for
// (another core read the line last, say) is on its way before the store.
func (r *Region) PrefetchW(off uint64) {
	if off < uint64(len(r.b)) {
		prefetchw(addr(r.b) + uintptr(off))
	}
}

// Demote hints that this core is done with the line holding off for now:
// the processor may move it from the core's private caches to the shared
// last-level cache (CLDEMOTE, on processors that have it), so the next
// reader or writer on another core, or a device, finds it there instead of
// snooping this core for it.
func (r *Region) Demote(off uint64) {
	if off < uint64(len(r.b)) {
		demote(addr(r.b) + uintptr(off))
	}
}
