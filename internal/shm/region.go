package shm

import "fmt"

// Region is a view of shared memory.
type Region struct {
	b []byte
}

// New wraps b (for example a mapping, or a plain slice in tests). b must be
// 8-byte aligned, as every mapping is.
func New(b []byte) *Region {
	if len(b) > 0 && addr(b)%8 != 0 {
		panic("shm: region not 8-byte aligned")
	}
	return &Region{b: b}
}

// Len is the region's size in bytes.
func (r *Region) Len() int { return len(r.b) }

// Bytes returns the raw bytes from off to off+n. Callers must treat them as
// changing under their feet: copy, then read.
func (r *Region) Bytes(off, n uint64) []byte {
	r.check(off, n, 1)
	return r.b[off : off+n : off+n]
}

// CopyOut copies len(dst) bytes at off into dst.
func (r *Region) CopyOut(dst []byte, off uint64) {
	r.check(off, uint64(len(dst)), 1)
	copy(dst, r.b[off:])
}

// CopyIn copies src to off.
func (r *Region) CopyIn(off uint64, src []byte) {
	r.check(off, uint64(len(src)), 1)
	copy(r.b[off:], src)
}

// Load32 atomically loads the uint32 at off.
func (r *Region) Load32(off uint64) uint32 {
	r.check(off, 4, 4)
	return load32(r.b, off)
}

// Store32 atomically stores v at off.
func (r *Region) Store32(off uint64, v uint32) {
	r.check(off, 4, 4)
	store32(r.b, off, v)
}

// Load64 atomically loads the uint64 at off.
func (r *Region) Load64(off uint64) uint64 {
	r.check(off, 8, 8)
	return load64(r.b, off)
}

// Store64 atomically stores v at off.
func (r *Region) Store64(off uint64, v uint64) {
	r.check(off, 8, 8)
	store64(r.b, off, v)
}

// Words64 is the n 8-byte words at off (8-aligned) as a slice, for a loop
// that loads many words with sync/atomic's functions on its elements: the
// region's bounds are checked once here, not once a word.
func (r *Region) Words64(off, n uint64) []uint64 {
	if n > uint64(len(r.b))/8 {
		r.outside(off, n*8, 8)
	}
	r.check(off, n*8, 8)
	if n == 0 {
		return nil
	}
	return words64(r.b, off, n)
}

// Put64 stores v at off with a plain store: no barrier (an atomic store is
// a locked exchange on amd64, which drains the store buffer). For the
// payload of a record that a later Store64 or compare-and-swap of this
// goroutine publishes: those order it before themselves (they are release
// operations on every architecture Go supports), so a reader that sees the
// publishing word, atomically, sees v.
func (r *Region) Put64(off uint64, v uint64) {
	r.check(off, 8, 8)
	put64(r.b, off, v)
}

// Release64 stores v at off after every earlier store of this goroutine
// (Put64's, say) for a reader in another process or on a device that loads
// the word first: on amd64 a plain store, which the store buffer takes
// without waiting for the line (an atomic store or a compare-and-swap
// waits for it and drains the buffer); elsewhere an atomic store. It is not
// an atomic operation for Go's race detector: only for shared memory whose
// other side is not a goroutine of this process.
func (r *Region) Release64(off uint64, v uint64) {
	r.check(off, 8, 8)
	release64(r.b, off, v)
}

// check panics unless [off, off+n) is inside the region and off is a
// multiple of align (a power of two). It is small enough to inline: every
// access on the syscall poller's path goes through it.
func (r *Region) check(off, n, align uint64) {
	if off&(align-1) != 0 || off > uint64(len(r.b)) || n > uint64(len(r.b))-off {
		r.outside(off, n, align)
	}
}

//go:noinline
func (r *Region) outside(off, n, align uint64) {
	panic(fmt.Sprintf("shm: access [%d, +%d) align %d outside region of %d bytes", off, n, align, len(r.b)))
}

// CompareAndSwap32 atomically replaces the uint32 at off with new if it is
// old, and reports whether it did.
func (r *Region) CompareAndSwap32(off uint64, old, new uint32) bool {
	r.check(off, 4, 4)
	return cas32(r.b, off, old, new)
}

// And32 atomically clears the bits of the uint32 at off that mask does not
// have.
func (r *Region) And32(off uint64, mask uint32) {
	r.check(off, 4, 4)
	and32(r.b, off, mask)
}

// CompareAndSwap64 atomically replaces the uint64 at off with new if it is
// old, and reports whether it did.
func (r *Region) CompareAndSwap64(off uint64, old, new uint64) bool {
	r.check(off, 8, 8)
	return cas64(r.b, off, old, new)
}
