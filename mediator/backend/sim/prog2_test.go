package sim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall/slotcalltest"
)

func TestPreadSweep(t *testing.T) {
	data := make([]byte, 50_001)
	var sum uint64
	for i := range data {
		data[i] = byte(i * 7)
		sum += uint64(data[i])
	}
	for _, g := range grans {
		t.Run(g.name, func(t *testing.T) {
			e := newProgEnv(t, newSim(t, "wall", nil), 64, nil, slotcalltest.Options{})
			fs := newFakeFS(e.heap, nil)
			fs.fds[5] = data
			e.host = slotcalltest.Start(e.area, fs.serve, slotcalltest.Options{})
			t.Cleanup(e.host.Stop)
			const grid, block, chunk, iters = 3, 4, 1000, 2
			callers := map[uint8]int{abi.ProgWorkItem: grid * block, abi.ProgWorkGroup: grid, abi.ProgKernel: 1}[g.gran]
			b := prog{slots: 7, first: 3, gran: g.gran, order: g.order, ctx: 4, iterations: iters}.blob(abi.SweepBlobSize)
			le := binary.LittleEndian
			le.PutUint32(b[abi.SweepFD:], 5)
			le.PutUint64(b[abi.SweepBuf:], hData)
			le.PutUint64(b[abi.SweepChunk:], chunk)
			le.PutUint64(b[abi.SweepFileSize:], uint64(len(data))+500) // the end reads short, then 0
			if c := e.launch(abi.KernelPreadSwp, grid, block, b, stdRelocs(abi.SweepHeap)); c.Code != abi.OK {
				t.Fatalf("%+v", c)
			}
			var bytes, failed, got uint64
			for c := range callers {
				bytes += e.out64(3 * c)
				failed += e.out64(3*c + 1)
				got += e.out64(3*c + 2)
			}
			if bytes != iters*uint64(len(data)) || failed != 0 || got != iters*sum {
				t.Errorf("bytes %d failed %d sum %d, want %d 0 %d", bytes, failed, got, iters*len(data), iters*sum)
			}
			if fs.ctxs[4] != int(e.host.Served()) {
				t.Errorf("contexts %v", fs.ctxs)
			}
			// A bad fd: every call fails.
			le.PutUint32(b[abi.SweepFD:], 6)
			if c := e.launch(abi.KernelPreadSwp, grid, block, b, stdRelocs(abi.SweepHeap)); c.Code != abi.OK {
				t.Fatalf("%+v", c)
			}
			failed = 0
			for c := range callers {
				failed += e.out64(3*c + 1)
			}
			if failed != iters*51 { // ceil(50501 / 1000) chunks per sweep
				t.Errorf("failed %d, want %d", failed, iters*51)
			}
		})
	}
}

// words is the reference count.
func words(b []byte) uint64 {
	return uint64(len(bytes.FieldsFunc(b, func(r rune) bool { return r < 128 && isSpace(byte(r)) })))
}

func genFile(r *rand.Rand, n int) []byte {
	const ws = " \t\n\v\f\r"
	var b []byte
	for len(b) < n {
		for range r.IntN(3) + 1 {
			b = append(b, ws[r.IntN(len(ws))])
		}
		wl := r.IntN(12) + 1
		if r.IntN(10) == 0 {
			wl = 200 // spans chunks
		}
		for range wl {
			b = append(b, byte('a'+r.IntN(26)))
		}
	}
	if r.IntN(2) == 0 {
		b = b[1:] // starts inside a word
	}
	return b
}

func TestWordCount(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	files := map[string][]byte{}
	var paths []byte
	const nfiles = 7
	for i := range nfiles {
		name := fmt.Sprintf("/data/f%d", i)
		files[name] = genFile(r, 3000+r.IntN(5000))
		paths = append(append(paths, name...), 0)
	}
	files["/data/f3"] = nil // empty
	paths = append(paths, "/data/missing\x00"...)
	for _, g := range grans {
		t.Run(g.name, func(t *testing.T) {
			e := newProgEnv(t, newSim(t, "wall", nil), 64, nil, slotcalltest.Options{})
			fs := newFakeFS(e.heap, files)
			e.host = slotcalltest.Start(e.area, fs.serve, slotcalltest.Options{})
			t.Cleanup(e.host.Stop)
			copy(e.heap[hData:], paths)
			const grid, block, chunk = 3, 16, 97
			b := prog{slots: 2, gran: g.gran, order: g.order}.blob(abi.WCBlobSize)
			le := binary.LittleEndian
			le.PutUint64(b[abi.WCPaths:], hData)
			le.PutUint32(b[abi.WCNumPaths:], nfiles+1)
			le.PutUint64(b[abi.WCBuf:], hData+4096)
			le.PutUint64(b[abi.WCChunk:], chunk)
			if c := e.launch(abi.KernelWordCount, grid, block, b, stdRelocs(abi.WCHeap)); c.Code != abi.OK {
				t.Fatalf("%+v", c)
			}
			groups := grid
			if g.gran == abi.ProgKernel {
				groups = 1
			}
			for gr := range grid {
				var want [3]uint64
				for f := gr; f < nfiles+1 && gr < groups; f += groups {
					data := files[fmt.Sprintf("/data/f%d", f)]
					want[0] += words(data)
					want[1] += uint64(len(data))
					if f == nfiles && want[2] == 0 {
						want[2] = uint64(abi.ErrnoNOENT)
					}
				}
				if got := [3]uint64{e.out64(3 * gr), e.out64(3*gr + 1), e.out64(3*gr + 2)}; got != want {
					t.Errorf("group %d: %v, want %v", gr, got, want)
				}
			}
			if len(fs.fds) != 0 {
				t.Errorf("files left open: %v", fs.fds)
			}
		})
	}
}

func TestCountWordsParts(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		b := genFile(r, r.IntN(600))
		want := words(b)
		for _, parts := range []int{1, 2, 7, 64, 1024} {
			for _, cut := range []int{1, 13, 256} { // chunks
				var got uint64
				in := false
				for off := 0; off < len(b); off += cut {
					n, end := countWords(b[off:min(off+cut, len(b))], parts, in)
					got, in = got+n, end
				}
				if got != want {
					t.Fatalf("parts %d chunk %d: %d words, want %d in %q", parts, cut, got, want, b)
				}
			}
		}
	}
}
