package sim

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A VM's device state lives, from its Attach on, in two memfds, so that a
// successor process adopts it after a crash (backend.Persister) as after
// a hand-over (Keep): the arena, whose 64 KiB slots back the buffers'
// pages, and the meta file, little-endian:
//
//	0    [8]byte magic     devMagic (zeroed when the state is given up)
//	8    u64     version   devVersion
//	16   u64     ringCtr   the request ring's claim counter, live
//	24   u64     commit    bit 63: the active segment; the rest: its committed bytes
//	32   {u64 off, u64 cap}[2]  the two segments, in the meta file
//	4096 ...               the segments
//
// A segment is a run of 24-byte records (devRecord), replayed in order
// from an empty state: the state is the active segment's committed
// records. Each command that changes the state appends its records, then
// stores the commit word once (an atomic store: a kill -9 leaves either
// the old word or the new), so a command is in the state whole or not at
// all. Data is never written in place: a MEMSET or COPY writes the pages
// it changes into free slots (copy on write), and its records point the
// pages at them; a slot the committed records name is never written, and
// one they stop naming is reused only after the commit. When the active
// segment is full, the state is written afresh, compacted, into the other
// one, and the commit word switches to it.
//
// Only the VM's mover goroutine writes the files (effects.go), so the
// records follow the order the commands started in, outside Sim.mu.
const (
	devMagic   = "sluiceSD"
	devVersion = 1
	devHeader  = 4096
	hdrVersion = 8
	hdrRingCtr = 16
	hdrCommit  = 24
	hdrSegs    = 32
	commitSeg  = uint64(1) << 63
	recLen     = 24
	// metaReserve is the address space reserved for a meta file.
	metaReserve = 1 << 32
	// arenaReserveMax bounds the address space reserved for an arena.
	arenaReserveMax = 1 << 40
)

// devFile is a VM's device state files and their mappings, and the state
// as committed (view, mods). Only the VM's mover uses it once the VM is
// attached (then Keep and Close, once the mover is done).
type devFile struct {
	meta, arena int
	mm, am      []byte // the reserved mappings
	metaSize    uint64
	arenaSize   uint64
	ringCtr     *atomic.Uint64 // in mm

	active int
	used   uint64 // committed bytes of the active segment
	seg    [2]struct{ off, cap uint64 }

	refs []uint32 // per slot: the pages naming it
	free []uint32 // slots no page names

	view map[uint32]*buffer  // the buffers, by handle, as committed
	mods map[uint32]struct{} // the modules, as committed

	tx    []byte      // records of the command being committed
	dirty []dirtyPage // pages it set
	drop  []*page     // pages it replaced: released after the commit
	gone  []*page     // pages of the buffers it freed: released after the commit

	broken bool // given up (no room): nothing is recorded any more

	// hook, when set (by tests), is called where a crash leaves the
	// files as they are: before and after the commit word changes.
	hook func(committed bool)
}

// segMin is a fresh segment's least capacity (a variable for tests).
var segMin uint64 = 64 << 10

// maxBuffers bounds the buffers one VM may hold (an ALLOC past it fails
// with ErrNoMemory, as one past the memory does): each buffer's last page
// may take a slot of its own however small the buffer, so the arena's
// reserve counts one for each (arenaReserve). A variable for tests.
var maxBuffers = 1 << 16

// makeDevFile makes a VM's device files (newDevFile; a variable for
// tests, which make it fail).
var makeDevFile = newDevFile

// heapDevFile is the device state of a VM whose files could not be made:
// given up from the start, its state (view, mods) kept in the heap alone,
// for Keep to write into fresh files.
func heapDevFile() *devFile {
	d := emptyDevFile()
	d.broken = true
	return d
}

// emptyDevFile is a device state with no files and nothing in it.
func emptyDevFile() *devFile {
	return &devFile{meta: -1, arena: -1, view: map[uint32]*buffer{}, mods: map[uint32]struct{}{}}
}

func (d *devFile) at(committed bool) {
	if d.hook != nil {
		d.hook(committed)
	}
}

type dirtyPage struct {
	b *buffer
	i uint64
}

// newDevFile makes a VM's empty device files, with room for memory bytes
// of buffers.
func newDevFile(memory uint64) (_ *devFile, err error) {
	d := emptyDevFile()
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if d.meta, err = unix.MemfdCreate("sluice-sim-meta", unix.MFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("creating the device meta file: %w", err)
	}
	if d.arena, err = unix.MemfdCreate("sluice-sim-arena", unix.MFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("creating the device arena: %w", err)
	}
	if err = d.mapFiles(memory); err != nil {
		return nil, err
	}
	if err = d.growMeta(devHeader + segMin); err != nil {
		return nil, err
	}
	d.seg[0].off, d.seg[0].cap = devHeader, segMin
	d.writeSegs()
	le.PutUint64(d.mm[hdrVersion:], devVersion)
	copy(d.mm, devMagic)
	return d, nil
}

// mapFiles reserves the address space for both files.
func (d *devFile) mapFiles(memory uint64) error {
	var err error
	if d.mm, err = unix.Mmap(d.meta, 0, metaReserve, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE); err != nil {
		return fmt.Errorf("mapping the device meta file: %w", err)
	}
	d.ringCtr = (*atomic.Uint64)(unsafe.Pointer(&d.mm[hdrRingCtr]))
	if d.am, err = unix.Mmap(d.arena, 0, int(arenaReserve(memory)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE); err != nil {
		return fmt.Errorf("mapping the device arena: %w", err)
	}
	return nil
}

// arenaReserve is the arena's address space for memory bytes of buffers,
// in slots: the pages of the buffers (memory/pageSize, and the last page
// of each of up to maxBuffers buffers, whatever their sizes), the pages a
// command writes anew before the ones they replace are released (one
// buffer's: memory/pageSize and one), and a little more. Slots never run
// out then, up to arenaReserveMax.
func arenaReserve(memory uint64) uint64 {
	slots := 2*(memory/pageSize) + uint64(maxBuffers) + 64
	return min(slots, arenaReserveMax/pageSize) * pageSize
}

// close unmaps and closes the files.
func (d *devFile) close() {
	d.unmap()
	for _, fd := range []int{d.meta, d.arena} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	d.meta, d.arena = -1, -1
}

// unmap drops the mappings; the files stay open.
func (d *devFile) unmap() {
	for _, m := range [][]byte{d.mm, d.am} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	d.mm, d.am, d.ringCtr = nil, nil, nil
}

func (d *devFile) growMeta(size uint64) error {
	if size > metaReserve {
		return fmt.Errorf("the device meta file would be %d bytes, more than %d", size, metaReserve)
	}
	if err := unix.Ftruncate(d.meta, int64(size)); err != nil {
		return fmt.Errorf("growing the device meta file: %w", err)
	}
	d.metaSize = size
	return nil
}

// writeSegs writes the segments' places into the header (the active one's
// never changes while it is active).
func (d *devFile) writeSegs() {
	for i, s := range d.seg {
		le.PutUint64(d.mm[hdrSegs+16*i:], s.off)
		le.PutUint64(d.mm[hdrSegs+16*i+8:], s.cap)
	}
}

// commitWord is the header's commit word.
func (d *devFile) commitWord() *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&d.mm[hdrCommit]))
}

// newPage is a page of n bytes to write (its contents are stale): in a
// free slot of the arena, or, without one, in the heap (the device file
// is given up then).
func (d *devFile) newPage(n uint64) *page {
	if d != nil && !d.broken {
		if s, ok := d.slot(); ok {
			return &page{b: d.am[uint64(s)*pageSize:][:n:n], slot: int32(s), fresh: true}
		}
	}
	return &page{b: make([]byte, n), slot: -1, fresh: true}
}

// slot takes a free slot, growing the arena when none is left.
func (d *devFile) slot() (uint32, bool) {
	if len(d.free) == 0 {
		have := d.arenaSize / pageSize
		size := min(max(d.arenaSize+16*pageSize, d.arenaSize/pageSize*5/4*pageSize), uint64(len(d.am))/pageSize*pageSize)
		if size <= d.arenaSize {
			d.giveUp(fmt.Errorf("the arena's %d bytes are all in use", d.arenaSize))
			return 0, false
		}
		if err := unix.Ftruncate(d.arena, int64(size)); err != nil {
			d.giveUp(fmt.Errorf("growing the device arena: %w", err))
			return 0, false
		}
		d.arenaSize = size
		for s := size / pageSize; s > have; s-- {
			d.free = append(d.free, uint32(s-1)) // the lowest on top
		}
		d.refs = slices.Grow(d.refs, int(size/pageSize-have))[:size/pageSize]
	}
	s := d.free[len(d.free)-1]
	d.free = d.free[:len(d.free)-1]
	return s, true
}

// pageSet is buffer.setPage's note: b's page i is p now, old before.
func (d *devFile) pageSet(b *buffer, i uint64, old, p *page) {
	if p != nil && p.slot >= 0 {
		d.refs[p.slot]++
	}
	if old != nil && old.slot >= 0 {
		d.drop = append(d.drop, old)
	}
	d.dirty = append(d.dirty, dirtyPage{b, i})
}

// giveUp stops recording the state, which a successor then refuses: the
// magic goes first.
func (d *devFile) giveUp(err error) {
	if d.broken {
		return
	}
	d.broken = true
	(*atomic.Uint64)(unsafe.Pointer(&d.mm[0])).Store(0)
	slog.Warn("sim: a VM's device state is no longer kept in its files; a successor after a crash starts it afresh", "err", err)
}

// record appends a record to the command's.
func (d *devFile) record(r devRecord) {
	d.tx = r.append(d.tx)
}

// alloc records an ALLOC that started: b is under handle h.
func (d *devFile) alloc(h uint32, b *buffer) {
	d.view[h] = b
	d.record(devRecord{kind: recAlloc, handle: h, a: b.size})
}

// freeBuf records a FREE of b, under handle h: its pages are released. A
// buffer the state does not have (a timed-out ALLOC's, which other
// channels may have written before the timeout ended) has its pages
// released and nothing recorded.
func (d *devFile) freeBuf(h uint32, b *buffer) {
	if d.view[h] != b {
		if b.dev == d {
			d.release(b)
		}
		return
	}
	d.release(b)
	delete(d.view, h)
	d.record(devRecord{kind: recFree, handle: h})
}

// module records a LOAD_MODULE.
func (d *devFile) module(h uint32) {
	d.mods[h] = struct{}{}
	d.record(devRecord{kind: recModule, handle: h})
}

// reset records the loss of every buffer and module (a command ran past
// the VM's limit): bufs, the VM's buffers when it did. Those the state
// does not have (timed-out ALLOCs') have their pages released too.
func (d *devFile) reset(bufs map[uint32]*buffer) {
	for h, b := range bufs {
		if d.view[h] != b && b.dev == d {
			d.release(b)
		}
	}
	for _, b := range d.view {
		d.release(b)
	}
	clear(d.view)
	clear(d.mods)
	d.record(devRecord{kind: recReset})
}

// release drops b's pages after the commit; b is nobody's.
func (d *devFile) release(b *buffer) {
	for _, p := range b.pages {
		if p.slot >= 0 {
			d.gone = append(d.gone, p)
		}
	}
	b.dev = nil // a movement that still holds it writes in the heap
}

// commit makes the command's records (and the pages it set) the state:
// appended to the active segment, or, when it is full, with the whole
// state compacted into the other; then releases what it replaced.
func (d *devFile) commit() {
	if len(d.tx) == 0 && len(d.dirty) == 0 && len(d.drop) == 0 && len(d.gone) == 0 {
		return
	}
	if !d.broken { // given up: nothing is recorded, and heap pages are written in place
		for _, dp := range d.dirty {
			if d.view[dp.b.handle] != dp.b || dp.b.dev != d {
				continue // not (or no longer) a buffer of the state
			}
			p := dp.b.pages[dp.i]
			d.tx = devRecord{kind: recPage, handle: dp.b.handle, a: dp.i, b: pageRef(p)}.append(d.tx)
			if p != nil && p.fresh { // never a fill page, which every VM shares
				p.fresh = false
			}
		}
		d.at(false)
		if s := d.seg[d.active]; d.used+uint64(len(d.tx)) <= s.cap {
			copy(d.mm[s.off+d.used:], d.tx)
			d.at(false)
			d.used += uint64(len(d.tx))
			d.commitWord().Store(uint64(d.active)<<63 | d.used)
			d.at(true)
		} else {
			d.compact()
		}
	}
	for _, p := range d.drop {
		d.unref(p.slot)
	}
	freed := len(d.free)
	for _, p := range d.gone {
		d.unref(p.slot)
	}
	if len(d.free)-freed >= punchMin {
		d.punch(d.free[freed:])
	}
	d.tx, d.dirty, d.drop, d.gone = d.tx[:0], d.dirty[:0], d.drop[:0], d.gone[:0]
}

// unref drops a page's hold on slot s.
func (d *devFile) unref(s int32) {
	if d.refs[s]--; d.refs[s] == 0 {
		d.free = append(d.free, uint32(s))
	}
}

// punchMin is the fewest slots the buffers a command frees (a FREE, the
// loss after a timeout) must free for punch to give them back to the host;
// fewer stay backed for the next pages written, as do the pages a MEMSET
// or COPY replaces (the next one reuses them at once).
const punchMin = 16

// punch gives the host memory of free slots back (a hole in the arena:
// they read as zeros and are backed again when written).
func (d *devFile) punch(slots []uint32) {
	sorted := slices.Sorted(slices.Values(slots))
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && sorted[j] == sorted[j-1]+1 {
			j++
		}
		// A failure leaves the memory backed: nothing else changes.
		_ = unix.Fallocate(d.arena, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE,
			int64(sorted[i])*pageSize, int64(j-i)*pageSize)
		i = j
	}
}

// compact writes the state (the view, which the command's records are in
// already) into the other segment, made big enough, and switches to it.
func (d *devFile) compact() {
	snap := d.snapshot(nil)
	o := 1 - d.active
	if d.seg[o].off < devHeader || d.seg[o].cap < uint64(len(snap)) { // never placed (adoption unplaces one unusable), or too small
		c := 2*uint64(len(snap)) + segMin
		off := d.metaSize
		if err := d.growMeta(off + c); err != nil {
			d.giveUp(err)
			return
		}
		d.seg[o].off, d.seg[o].cap = off, c
		d.writeSegs() // the inactive segment's place: the state does not name it
	}
	copy(d.mm[d.seg[o].off:], snap)
	d.at(false)
	d.commitWord().Store(uint64(o)<<63 | uint64(len(snap)))
	d.active, d.used = o, uint64(len(snap))
	d.at(true)
}

// snapshot appends the records of the state, compacted, to out, each
// page's as pageRef says.
func (d *devFile) snapshot(out []byte) []byte { return d.snapshotWith(out, pageRef) }

// snapshotWith is snapshot, each page's record saying ref(page).
func (d *devFile) snapshotWith(out []byte, ref func(*page) uint64) []byte {
	for _, h := range slices.Sorted(maps.Keys(d.mods)) {
		out = devRecord{kind: recModule, handle: h}.append(out)
	}
	for _, h := range slices.Sorted(maps.Keys(d.view)) {
		b := d.view[h]
		out = devRecord{kind: recAlloc, handle: h, a: b.size}.append(out)
		for _, i := range slices.Sorted(maps.Keys(b.pages)) {
			out = devRecord{kind: recPage, handle: h, a: i, b: ref(b.pages[i])}.append(out)
		}
	}
	return out
}

// pageRef is what a page record says of p.
func pageRef(p *page) uint64 {
	switch {
	case p == nil:
		return refZero
	case p.slot >= 0:
		return refSlot | uint64(p.slot)
	case isFill(p):
		return refFill | uint64(p.b[0])
	}
	return refHeap // not in the arena: the state is given up already
}
