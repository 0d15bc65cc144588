package sim

import (
	"fmt"
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

var (
	_ backend.Keeper    = (*simVM)(nil)
	_ backend.Persister = (*simVM)(nil)
)

// Stored is the VM's device files (devfile.go), the sim's, for an fd
// store: a successor after a crash attaches the VM with them (VMSpec.Adopt)
// as with Keep's. None where the VM keeps its state in none (its files
// could not be made, or it gave them up).
func (v *simVM) Stored() backend.Kept {
	if v.dev == nil || v.dev.broken { // nil: closed
		return backend.Kept{Backend: "sim"}
	}
	return backend.Kept{Backend: "sim", FDs: []int{v.dev.meta, v.dev.arena}}
}

// Keep closes the VM as Close does and hands its device files over: what
// its commands committed (a movement under way finishes first; the rest
// are dropped and run again in the successor). A VM whose files were
// given up, or never made, has its state written into fresh ones (it is
// quiescent now). The completions Close delivers are the caller's to
// drop.
func (v *simVM) Keep() (backend.Kept, error) {
	var d *devFile
	var ringCtr uint64
	err := v.close(func() { d, v.dev, ringCtr = v.dev, nil, v.ringCtr.Load() })
	if err != nil {
		return backend.Kept{}, fmt.Errorf("keeping VM %d: %w", v.id, err)
	}
	if d.broken {
		nd, err := d.refile(v.s.p.Memory, ringCtr)
		d.close()
		if err != nil {
			return backend.Kept{}, fmt.Errorf("keeping VM %d: writing its device state into fresh files: %w", v.id, err)
		}
		d = nd
	}
	d.unmap() // its programs and mover have ended
	return backend.Kept{Backend: "sim", FDs: []int{d.meta, d.arena}}, nil
}

// refile writes the state (view, mods: the VM is quiescent) and the
// claim counter into fresh files, for a VM whose files were given up or
// never made: each page's data is copied into a slot of the new arena
// (a page buffers share stays shared), fills and zeros stay what they
// are. Its arena has room (arenaReserve) as the VM's had.
func (d *devFile) refile(memory, ringCtr uint64) (_ *devFile, err error) {
	nd, err := makeDevFile(memory)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			nd.close()
		}
	}()
	slots := map[*page]uint32{}
	full := false
	snap := d.snapshotWith(nil, func(p *page) uint64 {
		if p == nil || isFill(p) {
			return pageRef(p)
		}
		s, ok := slots[p]
		if !ok {
			if s, ok = nd.slot(); !ok {
				full = true
				return refHeap
			}
			copy(nd.am[uint64(s)*pageSize:], p.b)
			slots[p] = s
		}
		return refSlot | uint64(s)
	})
	if full {
		return nil, fmt.Errorf("the fresh arena's %d bytes are all in use", nd.arenaSize)
	}
	if n := uint64(len(snap)); n > nd.seg[0].cap {
		if err := nd.growMeta(devHeader + n); err != nil {
			return nil, err
		}
		nd.seg[0].cap = n
		nd.writeSegs()
	}
	copy(nd.mm[nd.seg[0].off:], snap)
	nd.ringCtr.Store(ringCtr)
	nd.commitWord().Store(uint64(len(snap))) // segment 0
	return nd, nil
}

// openDev makes a VM's device files, or adopts the ones kept for it
// (where none can be made, a heapDevFile with an empty state: the VM then
// keeps its state in the heap alone).
func (s *Sim) openDev(a *backend.Kept) (*devFile, *kept, error) {
	if a != nil {
		return adoptDev(a, s.p.Memory)
	}
	k := &kept{bufs: map[uint32]*buffer{}, mods: map[uint32]struct{}{}}
	d, err := makeDevFile(s.p.Memory)
	if err != nil {
		slog.Warn("sim: a VM's device state is kept in no file; a successor after a crash starts it afresh", "err", err)
		return heapDevFile(), k, nil
	}
	return d, k, nil
}

// adoptDev checks the device files a predecessor kept (Keep, Stored) and
// takes them over: a duplicate of each, mapped, with the buffers and
// modules they hold, on memory bytes of device memory. The buffers'
// pages are the arena's slots (data, which the VM's own commands wrote);
// everything else comes from a copy of the records, checked whole.
func adoptDev(a *backend.Kept, memory uint64) (_ *devFile, _ *kept, err error) {
	if a.Backend != "sim" || len(a.FDs) != 2 || len(a.Data) != 0 {
		return nil, nil, fmt.Errorf("%w: backend %q's state, %d descriptors, %d bytes of data; want the sim's, two descriptors",
			backend.ErrBadKept, a.Backend, len(a.FDs), len(a.Data))
	}
	d := emptyDevFile()
	defer func() {
		if err != nil {
			d.close()
			err = fmt.Errorf("%w: %w", backend.ErrBadKept, err)
		}
	}()
	var sizes [2]uint64
	for i, fd := range a.FDs {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size < 0 {
			return nil, nil, fmt.Errorf("device file %d (fd %d): not a file (%v)", i, fd, err)
		}
		sizes[i] = uint64(st.Size)
	}
	if d.meta, err = unix.FcntlInt(uintptr(a.FDs[0]), unix.F_DUPFD_CLOEXEC, 3); err != nil {
		return nil, nil, err
	}
	if d.arena, err = unix.FcntlInt(uintptr(a.FDs[1]), unix.F_DUPFD_CLOEXEC, 3); err != nil {
		return nil, nil, err
	}
	if err = d.mapFiles(memory); err != nil {
		return nil, nil, err
	}
	if sizes[0] < devHeader || sizes[0] > metaReserve || sizes[1]%pageSize != 0 || sizes[1] > uint64(len(d.am)) {
		return nil, nil, fmt.Errorf("device files of %d and %d bytes", sizes[0], sizes[1])
	}
	d.metaSize, d.arenaSize = sizes[0], sizes[1]
	recs, ringCtr, commit, segs, err := committedRecords(d.mm[:d.metaSize])
	if err != nil {
		return nil, nil, err
	}
	st, err := decodeDev(recs, d.arenaSize/pageSize, memory)
	if err != nil {
		return nil, nil, err
	}
	d.active, d.used = int(commit>>63), commit&^commitSeg
	for i := range segs {
		d.seg[i].off, d.seg[i].cap = segs[i][0], segs[i][1]
	}
	if o := &d.seg[1-d.active]; o.off < devHeader || o.off > d.metaSize || o.cap > d.metaSize-o.off ||
		o.off < d.seg[d.active].off+d.seg[d.active].cap && d.seg[d.active].off < o.off+o.cap {
		o.off, o.cap = 0, 0 // unusable: a compaction places it anew
		d.writeSegs()
	}
	return d, d.build(st, ringCtr), nil
}

// build makes the runtime buffers of a checked state, their pages in the
// arena, and the free slots.
func (d *devFile) build(st *devState, ringCtr uint64) *kept {
	slots := d.arenaSize / pageSize
	d.refs = make([]uint32, slots)
	k := &kept{ringCtr: ringCtr, used: st.used, mods: map[uint32]struct{}{}, bufs: map[uint32]*buffer{}}
	for h := range st.mods {
		k.mods[h], d.mods[h] = struct{}{}, struct{}{}
	}
	for _, db := range st.bufs {
		for _, ref := range db.pages {
			if ref&refTag == refSlot {
				d.refs[ref&^refTag]++
			}
		}
	}
	for h, db := range st.bufs {
		b := &buffer{size: db.size, handle: h, dev: d}
		for i, ref := range db.pages {
			v := ref &^ refTag
			if ref&refTag == refFill {
				b.setPage(i, fillPage(byte(v)))
				continue
			}
			n := b.pageLen(i)
			d.refs[v]-- // setPage counts it again
			b.setPage(i, &page{b: d.am[v*pageSize:][:n:n], slot: int32(v), shared: d.refs[v] > 0})
		}
		k.bufs[h], d.view[h] = b, b
	}
	for s := slots; s > 0; s-- {
		if d.refs[s-1] == 0 {
			d.free = append(d.free, uint32(s-1))
		}
	}
	d.dirty, d.drop, d.gone = d.dirty[:0], d.drop[:0], d.gone[:0]
	return k
}

// isFill reports whether p is a shared fill page (fillPage).
func isFill(p *page) bool {
	return p.shared && len(p.b) == pageSize && p.b[0] != 0 && fillPages[p.b[0]].Load() == p
}

// kept is a VM's device state adopted from its files.
type kept struct {
	ringCtr uint64
	mods    map[uint32]struct{}
	bufs    map[uint32]*buffer
	used    uint64 // the buffers' sizes
}
