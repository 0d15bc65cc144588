package sim

import "sync/atomic"

// pageSize is the grain of a buffer's backing.
const pageSize = 64 << 10

// buffer is a device buffer of size bytes, backed lazily: a page nobody
// wrote has no backing and reads as zeros, so an ALLOC takes no host memory
// and a MEMSET of whole pages takes none either (they share a read-only
// fill page). size is fixed at ALLOC; pages are touched only by the VM's
// mover goroutine (effects.go), never under Sim.mu. A buffer of a VM's
// device file (dev) has its pages' data in the file's arena, and notes
// every page it sets there (devfile.go); one without (dev nil) has them in
// the heap.
type buffer struct {
	size   uint64
	handle uint32
	dev    *devFile
	pages  map[uint64]*page // by index; nil until the first write
}

// page is one page of backing (shorter at the end of a buffer whose size is
// not a whole number of pages). A shared page is read only: fill pages, and
// pages a device-to-device COPY handed to a second owner; writing one
// copies it first. So is a page of a device file's state: only a fresh
// one, made by the command running, is written in place (and it is in
// the state once the command commits).
type page struct {
	b      []byte
	shared bool
	fresh  bool
	slot   int32 // its slot in the device file's arena; -1: none
}

// fillPages are the whole pages of each byte value but 0, made when first
// needed and shared by every buffer of every VM.
var fillPages [256]atomic.Pointer[page]

func fillPage(v byte) *page {
	if p := fillPages[v].Load(); p != nil {
		return p
	}
	p := &page{b: make([]byte, pageSize), shared: true, slot: -1}
	fill(p.b, v)
	fillPages[v].CompareAndSwap(nil, p)
	return fillPages[v].Load()
}

// newDevBuffer is a buffer of d's, under handle h.
func newDevBuffer(size uint64, h uint32, d *devFile) *buffer {
	return &buffer{size: size, handle: h, dev: d}
}

// pageLen is the length of page i.
func (b *buffer) pageLen(i uint64) uint64 { return min(pageSize, b.size-i*pageSize) }

// setPage replaces page i (nil: zeros).
func (b *buffer) setPage(i uint64, p *page) {
	old := b.pages[i]
	if old == p {
		return
	}
	if p == nil {
		delete(b.pages, i)
	} else {
		if b.pages == nil {
			b.pages = map[uint64]*page{}
		}
		b.pages[i] = p
	}
	if b.dev != nil {
		b.dev.pageSet(b, i, old, p)
	}
}

// writable is page i, made or copied so that it can be written.
func (b *buffer) writable(i uint64) *page { return b.writableFor(i, false) }

// writableFor is writable; whole: the caller writes the whole page, so a
// new one need not be copied or cleared.
func (b *buffer) writableFor(i uint64, whole bool) *page {
	p := b.pages[i]
	if p != nil && p.fresh && !p.shared {
		return p
	}
	np := b.dev.newPage(b.pageLen(i))
	switch {
	case whole:
	case p != nil:
		copy(np.b, p.b)
	default:
		clear(np.b)
	}
	b.setPage(i, np)
	return np
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
		copy(b.writableFor(i, k == b.pageLen(i)).b[o:o+k], src[at:at+k])
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
			if p != nil && !p.shared { // a fill page is shared already, by every VM
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
