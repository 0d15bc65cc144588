package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// devRecord is one record of a device file's segment (devfile.go), 24
// bytes: u8 kind, 3 bytes of zeros, u32 handle, u64 a, u64 b.
//
//	recAlloc   handle, a: size     a buffer
//	recFree    handle              the buffer is gone
//	recModule  handle              a module loaded
//	recPage    handle, a: index, b: the page (refZero, refFill|value, refSlot|slot)
//	recReset   (all zero)          every buffer and module is gone
type devRecord struct {
	kind   uint8
	handle uint32
	a, b   uint64
}

const (
	recAlloc = 1 + iota
	recFree
	recModule
	recPage
	recReset
)

// A page record's b: the tag in the top byte, the value in the rest.
const (
	refZero = uint64(0)       // zeros (no backing)
	refFill = uint64(1) << 56 // a whole page of the value (1..255)
	refSlot = uint64(2) << 56 // the arena's slot
	refHeap = uint64(3) << 56 // never valid: a page outside the arena
	refTag  = uint64(0xff) << 56
)

func (r devRecord) append(out []byte) []byte {
	var b [recLen]byte
	b[0] = r.kind
	le.PutUint32(b[4:], r.handle)
	le.PutUint64(b[8:], r.a)
	le.PutUint64(b[16:], r.b)
	return append(out, b[:]...)
}

// devState is a device file's state, decoded from a copy of its records
// and checked: every buffer and page inside its bounds, every slot inside
// the arena, every handle as the commands left it.
type devState struct {
	bufs map[uint32]*devBuf
	mods map[uint32]struct{}
	used uint64 // the buffers' sizes
}

type devBuf struct {
	size  uint64
	pages map[uint64]uint64 // index: refFill|value or refSlot|slot
}

// decodeDev replays records (whole records, in the file: each is copied
// out before it is looked at) from an empty state, for an arena of slots
// slots and memory bytes of device memory. Anything a run of the sim
// cannot have written is an error, found as soon as it is replayed: the
// state decoded never holds more than memory bytes of buffers nor more
// than maxBuffers of them, so its pages (at most one a page of a buffer)
// are bounded too, whatever the records' length.
func decodeDev(records []byte, slots, memory uint64) (*devState, error) {
	if len(records)%recLen != 0 {
		return nil, fmt.Errorf("%d bytes of records, not a whole number", len(records))
	}
	st := &devState{bufs: map[uint32]*devBuf{}, mods: map[uint32]struct{}{}}
	var r [recLen]byte
	for at := 0; at < len(records); at += recLen {
		copy(r[:], records[at:])
		rec := devRecord{kind: r[0], handle: le.Uint32(r[4:]), a: le.Uint64(r[8:]), b: le.Uint64(r[16:])}
		if r[1]|r[2]|r[3] != 0 {
			return nil, fmt.Errorf("record %d: padding not zero", at/recLen)
		}
		if err := st.apply(rec, slots, memory); err != nil {
			return nil, fmt.Errorf("record %d: %w", at/recLen, err)
		}
	}
	return st, nil
}

// apply checks one record against the state and applies it.
func (st *devState) apply(r devRecord, slots, memory uint64) error {
	buf := st.bufs[r.handle]
	if r.kind != recPage && r.b != 0 || r.kind != recAlloc && r.kind != recPage && r.a != 0 {
		return errors.New("fields not zero")
	}
	switch r.kind {
	case recAlloc:
		if buf != nil || r.handle == 0 || r.a == 0 || r.a > math.MaxInt {
			return fmt.Errorf("buffer %d of %d bytes: a zero or live handle, or a bad size", r.handle, r.a)
		}
		if sum, carry := bits.Add64(st.used, r.a, 0); carry != 0 || sum > memory {
			return fmt.Errorf("buffer %d: the buffers' sizes are more than the %d bytes of memory", r.handle, memory)
		}
		if len(st.bufs) >= maxBuffers {
			return fmt.Errorf("buffer %d: more than %d buffers", r.handle, maxBuffers)
		}
		st.used += r.a
		st.bufs[r.handle] = &devBuf{size: r.a}
	case recFree:
		if buf == nil {
			return fmt.Errorf("FREE of buffer %d, not live", r.handle)
		}
		st.used -= buf.size
		delete(st.bufs, r.handle)
	case recModule:
		if _, dup := st.mods[r.handle]; dup || r.handle == 0 || len(st.mods) >= maxModules {
			return fmt.Errorf("module %d: zero, loaded, or one too many", r.handle)
		}
		st.mods[r.handle] = struct{}{}
	case recPage:
		if buf == nil || r.a >= (buf.size+pageSize-1)/pageSize {
			return fmt.Errorf("page %d of buffer %d: no such buffer or page", r.a, r.handle)
		}
		v := r.b &^ refTag
		switch r.b & refTag {
		case refZero:
			if v != 0 {
				return fmt.Errorf("page %d of buffer %d: zeros of %d", r.a, r.handle, v)
			}
			delete(buf.pages, r.a)
			return nil
		case refFill:
			if v == 0 || v > 0xff || buf.size-r.a*pageSize < pageSize {
				return fmt.Errorf("page %d of buffer %d: a fill of %d", r.a, r.handle, v)
			}
		case refSlot:
			if v >= slots {
				return fmt.Errorf("page %d of buffer %d: slot %d of %d", r.a, r.handle, v, slots)
			}
		default:
			return fmt.Errorf("page %d of buffer %d: tag %#x", r.a, r.handle, r.b>>56)
		}
		if buf.pages == nil {
			buf.pages = map[uint64]uint64{}
		}
		buf.pages[r.a] = r.b
	case recReset:
		if r.handle != 0 {
			return errors.New("a reset with a handle")
		}
		st.used = 0
		clear(st.bufs)
		clear(st.mods)
	default:
		return fmt.Errorf("kind %d", r.kind)
	}
	return nil
}

// committedRecords checks a meta file's header, m (its first bytes up to
// its size), and returns the active segment's committed records (in m:
// decodeDev copies each out), the claim counter, the segments and the
// commit word.
func committedRecords(m []byte) (recs []byte, ringCtr, commit uint64, segs [2][2]uint64, err error) {
	if len(m) < devHeader || !bytes.Equal(m[:8], []byte(devMagic)) || le.Uint64(m[hdrVersion:]) != devVersion {
		return nil, 0, 0, segs, errors.New("not a sim device file of this version")
	}
	ringCtr, commit = le.Uint64(m[hdrRingCtr:]), le.Uint64(m[hdrCommit:])
	for i := range segs {
		segs[i] = [2]uint64{le.Uint64(m[hdrSegs+16*i:]), le.Uint64(m[hdrSegs+16*i+8:])}
	}
	active, used := commit>>63, commit&^commitSeg
	off, capa := segs[active][0], segs[active][1]
	size := uint64(len(m))
	if off < devHeader || off > size || capa > size-off || used > capa {
		return nil, 0, 0, segs, fmt.Errorf("segment %d at %d, %d of %d bytes, outside the file's %d", active, off, used, capa, size)
	}
	return m[off : off+used], ringCtr, commit, segs, nil
}
