package sim

import (
	"bytes"
	"sync/atomic"
)

// pageSize is the grain of a buffer's backing.
const pageSize = 64 << 10

// buffer is a device buffer of size bytes, backed lazily: a page nobody
// wrote has no backing and reads as zeros, so an ALLOC takes no host memory
// and a MEMSET of whole pages takes none either (they share a read-only
// fill page). size is fixed at ALLOC; pages are touched only by the VM's
// mover goroutine (effects.go), never under Sim.mu.
type buffer struct {
	size  uint64
	pages map[uint64]*page // by index; nil until the first write
}

// page is one page of backing (shorter at the end of a buffer whose size is
// not a whole number of pages). A shared page is read only: fill pages, and
// pages a device-to-device COPY handed to a second owner; writing one
// copies it first.
type page struct {
	b      []byte
	shared bool
}

// fillPages are the whole pages of each byte value but 0, made when first
// needed and shared by every buffer of every VM.
var fillPages [256]atomic.Pointer[page]

func fillPage(v byte) *page {
	if p := fillPages[v].Load(); p != nil {
		return p
	}
	p := &page{b: make([]byte, pageSize), shared: true}
	fill(p.b, v)
	fillPages[v].CompareAndSwap(nil, p)
	return fillPages[v].Load()
}

func newBuffer(size uint64) *buffer { return &buffer{size: size} }

// pageLen is the length of page i.
func (b *buffer) pageLen(i uint64) uint64 { return min(pageSize, b.size-i*pageSize) }

// setPage replaces page i (nil: zeros).
func (b *buffer) setPage(i uint64, p *page) {
	if p == nil {
		delete(b.pages, i)
		return
	}
	if b.pages == nil {
		b.pages = map[uint64]*page{}
	}
	b.pages[i] = p
}

// writable is page i, made or copied so that it can be written.
func (b *buffer) writable(i uint64) *page {
	p := b.pages[i]
	switch {
	case p == nil:
		p = &page{b: make([]byte, b.pageLen(i))}
	case p.shared:
		p = &page{b: bytes.Clone(p.b)}
	default:
		return p
	}
	b.setPage(i, p)
	return p
}

// chunks calls f for each page-bounded piece of [off, off+n): the page, the
// offset in it, the length and the offset in the range. The caller checked
// the range against size.
func chunks(off, n uint64, f func(i, o, k, at uint64)) {
	for at := uint64(0); at < n; {
		i, o := (off+at)/pageSize, (off+at)%pageSize
		k := min(n-at, pageSize-o)
		f(i, o, k, at)
		at += k
	}
}

// memset sets [off, off+n) to v.
func (b *buffer) memset(off, n uint64, v byte) {
	chunks(off, n, func(i, o, k, _ uint64) {
		p := b.pages[i]
		switch {
		case k == pageSize && v == 0:
			b.setPage(i, nil)
		case k == pageSize:
			b.setPage(i, fillPage(v))
		case p == nil && v == 0, p != nil && p.shared && len(p.b) == pageSize && p == fillPages[v].Load():
			// already v
		default:
			fill(b.writable(i).b[o:o+k], v)
		}
	})
}

// read copies [off, off+len(dst)) into dst.
func (b *buffer) read(off uint64, dst []byte) {
	chunks(off, uint64(len(dst)), func(i, o, k, at uint64) {
		if p := b.pages[i]; p != nil {
			copy(dst[at:at+k], p.b[o:o+k])
		} else {
			clear(dst[at : at+k])
		}
	})
}

// write copies src to [off, off+len(src)).
func (b *buffer) write(off uint64, src []byte) {
	chunks(off, uint64(len(src)), func(i, o, k, at uint64) {
		if b.pages[i] == nil && allZero(src[at:at+k]) {
			return
		}
		copy(b.writable(i).b[o:o+k], src[at:at+k])
	})
}

// copyBuffer copies n bytes from src at soff to dst at doff, as memmove
// does when dst and src are one buffer. Whole pages at page-aligned offsets
// are shared rather than copied.
func copyBuffer(dst *buffer, doff uint64, src *buffer, soff, n uint64) {
	backward := dst == src && doff > soff && doff < soff+n
	var tmp []byte
	for done := uint64(0); done < n; {
		at := done
		k := min(n-done, pageSize)
		if backward {
			at = n - done - k
		}
		done += k
		if k == pageSize && (soff+at)%pageSize == 0 && (doff+at)%pageSize == 0 {
			p := src.pages[(soff+at)/pageSize]
			if p != nil {
				p.shared = true
			}
			dst.setPage((doff+at)/pageSize, p)
			continue
		}
		if tmp == nil {
			tmp = make([]byte, min(n, pageSize))
		}
		src.read(soff+at, tmp[:k])
		dst.write(doff+at, tmp[:k])
	}
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if le.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
