package sim

import (
	"bytes"
	"slices"
	"testing"
)

// FuzzPages runs MEMSETs, writes and device-to-device copies (overlapping
// ones included) on lazily backed buffers and on plain byte slices, and
// checks that both read the same.
func FuzzPages(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17})
	f.Add(bytes.Repeat([]byte{2, 0, 0, 1, 0, 0, 0, 0, 1, 0}, 8))
	f.Fuzz(func(t *testing.T, ops []byte) {
		fuzzPages(t, ops, nil)
		d, err := newDevFile(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		defer d.close()
		fuzzPages(t, ops, d)
	})
}

// fuzzPages runs ops on two buffers, of dev when not nil (each op a command
// committed), and checks them against plain slices; and, with dev, that
// the arena's slots are counted right: each page's slot named by as many
// pages as its count, the free ones by none.
func fuzzPages(t *testing.T, ops []byte, dev *devFile) {
	{
		const size = 3*pageSize + 123
		bufs := []*buffer{newDevBuffer(size, 1, dev), newDevBuffer(size, 2, dev)}
		if dev != nil {
			for _, b := range bufs {
				dev.alloc(b.handle, b)
			}
			dev.commit()
		}
		refs := [][]byte{make([]byte, size), make([]byte, size)}
		// at reads an offset scaled over the buffer, pages' edges included.
		at := func(b []byte) uint64 { return (uint64(b[0])<<8 | uint64(b[1])) * size / 65536 }
		for ; len(ops) >= 8; ops = ops[8:] {
			d, s := ops[0]&1, ops[0]>>1&1
			off, soff := at(ops[1:3]), at(ops[3:5])
			n := (uint64(ops[5])<<8 | uint64(ops[6])) * 4
			if ops[7]&0x80 != 0 {
				n = pageSize * uint64(ops[7]&3)
				off, soff = off/pageSize*pageSize, soff/pageSize*pageSize
			}
			n = min(n, size-off, size-soff)
			switch ops[0] >> 2 % 3 {
			case 0:
				bufs[d].memset(off, n, ops[7]&1*ops[6])
				fill(refs[d][off:off+n], ops[7]&1*ops[6])
			case 1:
				src := bytes.Repeat([]byte{ops[6], ops[5]}, int(n/2+1))[:n]
				bufs[d].write(off, src)
				copy(refs[d][off:off+n], src)
			case 2:
				copyBuffer(bufs[d], off, bufs[s], soff, n)
				copy(refs[d][off:off+n], refs[s][soff:soff+n])
			}
			if dev != nil {
				dev.commit()
			}
		}
		for i, b := range bufs {
			got := make([]byte, size)
			b.read(0, got)
			if !bytes.Equal(got, refs[i]) {
				t.Fatalf("buffer %d differs from its reference", i)
			}
		}
		if dev == nil {
			return
		}
		named := make([]uint32, len(dev.refs))
		for _, b := range bufs {
			for _, p := range b.pages {
				if p.slot >= 0 {
					named[p.slot]++
				}
			}
		}
		for _, s := range dev.free {
			if named[s] != 0 || dev.refs[s] != 0 {
				t.Fatalf("slot %d is free and named %d times (count %d)", s, named[s], dev.refs[s])
			}
		}
		if !slices.Equal(named, dev.refs) {
			t.Fatalf("slots named %v, counted %v", named, dev.refs)
		}
	}
}
