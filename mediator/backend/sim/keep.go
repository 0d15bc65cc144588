package sim

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// A VM's kept device state (Keep, and Attach with VMSpec.Adopt) is one
// sealed memfd, little-endian, written once the VM is closed, so that it
// is consistent (the pages are nobody's then):
//
//	0  [8]byte magic    keptMagic
//	8  u64     ringCtr  the request ring's claim counter
//	16 u32     mods     module handles that follow
//	20 u32     bufs     buffer entries that follow the modules
//	24 u64     pages    page entries that follow the buffers
//	32 u64     data     bytes of page data that follow the page entries
//	40 u64[mods]        module handles (in the low 32 bits)
//	   {u32 handle, u32 pages, u64 size}[bufs]
//	   {u64 index, u32 kind, u32 value}[pages]   each buffer's, in order
//	   data                                       each data page, in order
//
// A page entry is a page with backing: kind keptData, pageLen(index) bytes
// of the data in order, or kind keptFill, a whole page of value (1..255,
// the shared fill page). A page without an entry reads as zeros. Sharing
// between buffers (a device-to-device COPY's pages) is not kept: each
// owner gets its copy, still never more host memory than allocated.
const (
	keptMagic  = "sluiceSK"
	keptHeader = 40
	keptBufLen = 16
	keptPgLen  = 16
	keptData   = 0
	keptFill   = 1
)

// keptSeals are the seals a kept memfd must have: it can no longer change
// size or contents.
const keptSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL

var _ backend.Keeper = (*simVM)(nil)

// kept is a VM's device state, decoded and checked, or to encode.
type kept struct {
	ringCtr uint64
	mods    map[uint32]struct{}
	bufs    map[uint32]*buffer
	used    uint64 // the buffers' sizes
}

// Keep closes the VM as Close does, keeping its buffers (their contents),
// modules and the request ring's claim counter in a sealed memfd for a
// successor's Attach (VMSpec.Adopt). The completions Close delivers are
// the caller's to drop.
func (v *simVM) Keep() (backend.Kept, error) {
	var k kept
	err := v.close(func() {
		k = kept{mods: v.mods, bufs: v.bufs, used: v.memUsed}
	})
	if err != nil {
		return backend.Kept{}, fmt.Errorf("keeping VM %d: %w", v.id, err)
	}
	k.ringCtr = v.ringCtr.Load() // its programs have ended
	fd, err := k.write()
	if err != nil {
		return backend.Kept{}, fmt.Errorf("keeping VM %d: %w", v.id, err)
	}
	return backend.Kept{Backend: "sim", FDs: []int{fd}}, nil
}

// write puts k into a new sealed memfd, close-on-exec cleared.
func (k *kept) write() (fd int, err error) {
	var nPages, nData uint64
	for _, b := range k.bufs {
		for i, p := range b.pages {
			nPages++
			if !isFill(p) {
				nData += b.pageLen(i)
			}
		}
	}
	size := keptHeader + 8*uint64(len(k.mods)) + keptBufLen*uint64(len(k.bufs)) + keptPgLen*nPages + nData
	if fd, err = unix.MemfdCreate("sluice-sim-kept", unix.MFD_ALLOW_SEALING); err != nil {
		return -1, fmt.Errorf("creating the kept state's memfd: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return -1, fmt.Errorf("sizing the kept state's memfd: %w", err)
	}
	m, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return -1, fmt.Errorf("mapping the kept state's memfd: %w", err)
	}
	k.encode(m, nPages, nData)
	if err := unix.Munmap(m); err != nil {
		return -1, fmt.Errorf("unmapping the kept state's memfd: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, keptSeals); err != nil {
		return -1, fmt.Errorf("sealing the kept state's memfd: %w", err)
	}
	return fd, nil
}

// encode writes k into m, which is exactly its size.
func (k *kept) encode(m []byte, nPages, nData uint64) {
	copy(m, keptMagic)
	le.PutUint64(m[8:], k.ringCtr)
	le.PutUint32(m[16:], uint32(len(k.mods)))
	le.PutUint32(m[20:], uint32(len(k.bufs)))
	le.PutUint64(m[24:], nPages)
	le.PutUint64(m[32:], nData)
	at := uint64(keptHeader)
	for _, h := range slices.Sorted(maps.Keys(k.mods)) {
		le.PutUint64(m[at:], uint64(h))
		at += 8
	}
	handles := slices.Sorted(maps.Keys(k.bufs))
	for _, h := range handles {
		b := k.bufs[h]
		le.PutUint32(m[at:], h)
		le.PutUint32(m[at+4:], uint32(len(b.pages)))
		le.PutUint64(m[at+8:], b.size)
		at += keptBufLen
	}
	data := at + keptPgLen*nPages
	for _, h := range handles {
		b := k.bufs[h]
		for _, i := range slices.Sorted(maps.Keys(b.pages)) {
			p := b.pages[i]
			le.PutUint64(m[at:], i)
			if isFill(p) {
				le.PutUint32(m[at+8:], keptFill)
				le.PutUint32(m[at+12:], uint32(p.b[0]))
			} else {
				le.PutUint32(m[at+8:], keptData)
				data += uint64(copy(m[data:], p.b))
			}
			at += keptPgLen
		}
	}
}

// isFill reports whether p is a shared fill page (fillPage).
func isFill(p *page) bool {
	return p.shared && len(p.b) == pageSize && p.b[0] != 0 && fillPages[p.b[0]].Load() == p
}

// adoptKept reads the state a predecessor kept (Keep): this backend's,
// in one descriptor.
func adoptKept(a *backend.Kept) (*kept, error) {
	if a.Backend != "sim" || len(a.FDs) != 1 || len(a.Data) != 0 {
		return nil, fmt.Errorf("%w: backend %q's state, %d descriptors, %d bytes of data; want the sim's, one descriptor",
			backend.ErrBadKept, a.Backend, len(a.FDs), len(a.Data))
	}
	return readKept(a.FDs[0])
}

// readKept checks and decodes a kept state's memfd; it neither keeps nor
// closes fd. Every count, handle, size, page index and length is checked
// against the file and the others: a bad one is backend.ErrBadKept.
func readKept(fd int) (*kept, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%w: fd %d: %w", backend.ErrBadKept, fd, err)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&keptSeals != keptSeals || st.Size < keptHeader || st.Size > math.MaxInt {
		return nil, fmt.Errorf("%w: fd %d: want a sealed memfd (size %d, seals %#x, %v)", backend.ErrBadKept, fd, st.Size, seals, err)
	}
	m, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mapping fd %d: %w", backend.ErrBadKept, fd, err)
	}
	defer unix.Munmap(m)
	k, err := decodeKept(m)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrBadKept, err)
	}
	return k, nil
}

// decodeKept decodes a kept state from b, copying everything out of it.
func decodeKept(b []byte) (*kept, error) {
	if len(b) < keptHeader || !bytes.Equal(b[:8], []byte(keptMagic)) {
		return nil, errors.New("not a kept sim state")
	}
	k := &kept{ringCtr: le.Uint64(b[8:]), mods: map[uint32]struct{}{}, bufs: map[uint32]*buffer{}}
	nMods, nBufs, nPages, nData := uint64(le.Uint32(b[16:])), uint64(le.Uint32(b[20:])), le.Uint64(b[24:]), le.Uint64(b[32:])
	if nMods > maxModules {
		return nil, fmt.Errorf("%d modules, at most %d", nMods, maxModules)
	}
	// The tables, then the data, exactly the file: no sum overflows, as
	// each part is bounded by the file first.
	rest := uint64(len(b)) - keptHeader
	if nMods*8 > rest || nBufs*keptBufLen > rest-nMods*8 || nPages > (rest-nMods*8-nBufs*keptBufLen)/keptPgLen ||
		nData != rest-nMods*8-nBufs*keptBufLen-nPages*keptPgLen {
		return nil, fmt.Errorf("%d modules, %d buffers, %d pages and %d data bytes in %d bytes", nMods, nBufs, nPages, nData, len(b))
	}
	at := uint64(keptHeader)
	for range nMods {
		h := le.Uint64(b[at:])
		at += 8
		if _, dup := k.mods[uint32(h)]; dup || h == 0 || h > math.MaxUint32 {
			return nil, fmt.Errorf("module handle %#x: zero, repeated or too large", h)
		}
		k.mods[uint32(h)] = struct{}{}
	}
	pagesAt := at + nBufs*keptBufLen
	pagesEnd := pagesAt + nPages*keptPgLen
	dataAt := pagesEnd
	for range nBufs {
		h, np, size := le.Uint32(b[at:]), uint64(le.Uint32(b[at+4:])), le.Uint64(b[at+8:])
		at += keptBufLen
		if _, dup := k.bufs[h]; dup || h == 0 || size == 0 || size > math.MaxInt {
			return nil, fmt.Errorf("buffer %d of %d bytes: a zero or repeated handle, or a bad size", h, size)
		}
		sum, carry := bits.Add64(k.used, size, 0)
		if carry != 0 {
			return nil, errors.New("the buffers' sizes overflow")
		}
		k.used = sum
		buf := newBuffer(size)
		last := (size + pageSize - 1) / pageSize // pages in the buffer
		if np > last || np*keptPgLen > pagesEnd-pagesAt {
			return nil, fmt.Errorf("buffer %d: %d pages of %d, or past the page entries", h, np, last)
		}
		var err error
		if pagesAt, dataAt, err = decodePages(b, buf, np, pagesAt, dataAt, last); err != nil {
			return nil, fmt.Errorf("buffer %d: %w", h, err)
		}
		k.bufs[h] = buf
	}
	if pagesAt != pagesEnd || dataAt != uint64(len(b)) {
		return nil, errors.New("the buffers do not account for every page and data byte")
	}
	return k, nil
}

// decodePages decodes np page entries of buf from b at pagesAt, their data
// from dataAt, and returns where the next buffer's begin; indices must
// rise and be below last.
func decodePages(b []byte, buf *buffer, np, pagesAt, dataAt, last uint64) (uint64, uint64, error) {
	dataEnd := uint64(len(b))
	var prev uint64
	for j := range np {
		i, kind, val := le.Uint64(b[pagesAt:]), le.Uint32(b[pagesAt+8:]), le.Uint32(b[pagesAt+12:])
		pagesAt += keptPgLen
		if i >= last || j > 0 && i <= prev {
			return 0, 0, fmt.Errorf("page %d: out of order or beyond the buffer", i)
		}
		switch kind {
		case keptFill:
			if val == 0 || val > 0xff || buf.pageLen(i) != pageSize {
				return 0, 0, fmt.Errorf("page %d: a fill of %d", i, val)
			}
			buf.setPage(i, fillPage(byte(val)))
		case keptData:
			n := buf.pageLen(i)
			if val != 0 || n > dataEnd-dataAt {
				return 0, 0, fmt.Errorf("page %d: %d bytes of data past the file", i, n)
			}
			buf.setPage(i, &page{b: bytes.Clone(b[dataAt : dataAt+n])})
			dataAt += n
		default:
			return 0, 0, fmt.Errorf("page %d: kind %d", i, kind)
		}
		prev = i
	}
	return pagesAt, dataAt, nil
}
