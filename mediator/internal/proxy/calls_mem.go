package proxy

import (
	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// The memory calls act on the VM's heap, the only memory a GPU program
// shares with the host: there is no address space to map into. An address
// is a heap offset and a range is exactly [addr, addr+len) (no page
// rounding, no alignment asked of addr); a range outside the heap is EFAULT
// and an empty one EINVAL.
//
//   - mmap(addr, len, prot, flags, fd, off) fills the range and returns
//     addr: with MAP_ANONYMOUS, zeros; else the file's bytes from off (a
//     multiple of the page size, EINVAL otherwise), zeros past its end. The
//     copy is private: MAP_PRIVATE is the only file mapping (MAP_SHARED of a
//     file is EINVAL: writes could never reach the file). MAP_FIXED is
//     accepted and changes nothing (the range is always addr's); prot is
//     ignored (the heap is always readable and writable by the GPU).
//   - munmap(addr, len) zeros the range.
//   - madvise(addr, len, advice): MADV_DONTNEED, MADV_FREE and MADV_REMOVE
//     zero the range; other advice does nothing; both answer 0.

// Linux's mmap and madvise constants (x86-64 and arm64 agree).
const (
	mapShared    = 0x01
	mapPrivate   = 0x02
	mapType      = 0x0f
	mapAnonymous = 0x20
	madvDontneed = 4
	madvFree     = 8
	madvRemove   = 9
	pageSize     = 4096
)

// mmap(addr, len, prot, flags, fd, off)
func sysMmap(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	addr, n, flags, off := r.Args[0], r.Args[1], r.Args[3], r.Args[5]
	typ := flags & mapType
	anon := flags&mapAnonymous != 0
	switch {
	case n == 0, typ != mapPrivate && typ != mapShared, typ == mapShared && !anon, off%pageSize != 0:
		return 0, abi.ErrnoINVAL
	}
	b, e := heapRange(c.heap, addr, n)
	if e != 0 {
		return 0, e
	}
	if anon {
		clear(b)
		return int64(addr), 0
	}
	fd, e := c.fd(r.Args[4])
	if e != 0 {
		return 0, e
	}
	if e := preadFull(fd, b, int64(off)); e != 0 {
		return 0, e
	}
	return int64(addr), 0
}

// munmap(addr, len)
func sysMunmap(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	if r.Args[1] == 0 {
		return 0, abi.ErrnoINVAL
	}
	b, e := heapRange(c.heap, r.Args[0], r.Args[1])
	if e != 0 {
		return 0, e
	}
	clear(b)
	return 0, 0
}

// madvise(addr, len, advice)
func sysMadvise(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	if r.Args[1] == 0 {
		return 0, 0
	}
	b, e := heapRange(c.heap, r.Args[0], r.Args[1])
	if e != 0 {
		return 0, e
	}
	switch r.Args[2] {
	case madvDontneed, madvFree, madvRemove:
		clear(b)
	}
	return 0, 0
}
