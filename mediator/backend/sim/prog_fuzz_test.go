package sim

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall/slotcalltest"
)

var fuzzKernels = []string{abi.KernelSysOne, abi.KernelSysNull, abi.KernelPreadSwp, abi.KernelWordCount}

// FuzzSimProgram launches a program with arbitrary blob and relocation
// bytes against a host that serves everything: the sim must not panic; a
// launch it refuses completes with an error code and never ran; one it runs
// ends, or is aborted by Close.
//
// data: kernel (1 byte), grid (1), block (1), relocation count (1), then
// the relocations (8 bytes each) and the blob.
func FuzzSimProgram(f *testing.F) {
	seed := func(k int, grid, block byte, blob []byte, relocs [][2]uint32) []byte {
		b := []byte{byte(k), grid, block, byte(len(relocs))}
		for _, r := range relocs {
			b = binary.LittleEndian.AppendUint32(b, r[0])
			b = binary.LittleEndian.AppendUint32(b, r[1])
		}
		return append(b, blob...)
	}
	one := prog{slots: 2}.blob(abi.SysOneBlobSize)
	binary.LittleEndian.PutUint32(one[abi.SysOneNumber:], uint32(abi.SysNull))
	f.Add(seed(0, 2, 2, one, stdRelocs()))
	f.Add(seed(1, 3, 4, nullBlob(prog{slots: 3, gran: abi.ProgWorkItem, flags: abi.SysFlagBlocking, iterations: 2}), stdRelocs()))
	sweep := prog{slots: 4, gran: abi.ProgWorkGroup, iterations: 1}.blob(abi.SweepBlobSize)
	binary.LittleEndian.PutUint64(sweep[abi.SweepBuf:], hData)
	binary.LittleEndian.PutUint64(sweep[abi.SweepChunk:], 512)
	binary.LittleEndian.PutUint64(sweep[abi.SweepFileSize:], 4096)
	f.Add(seed(2, 2, 8, sweep, stdRelocs(abi.SweepHeap)))
	wc := prog{slots: 4, gran: abi.ProgWorkGroup, order: abi.ProgRelaxed}.blob(abi.WCBlobSize)
	binary.LittleEndian.PutUint64(wc[abi.WCPaths:], hData)
	binary.LittleEndian.PutUint32(wc[abi.WCNumPaths:], 3)
	binary.LittleEndian.PutUint64(wc[abi.WCBuf:], hData)
	binary.LittleEndian.PutUint64(wc[abi.WCChunk:], 64)
	f.Add(seed(3, 2, 8, wc, stdRelocs(abi.WCHeap)))
	f.Add(seed(1, 1, 1, []byte{1, 2, 3}, [][2]uint32{{0, 3}, {1 << 31, 2}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		k, grid, block, n := fuzzKernels[int(data[0])%len(fuzzKernels)], uint32(data[1])+1, uint32(data[2])+1, int(data[3])%8
		data = data[4:]
		if len(data) < 8*n {
			return
		}
		relocs := make([][2]uint32, n)
		for i := range relocs {
			relocs[i] = [2]uint32{binary.LittleEndian.Uint32(data[8*i:]), binary.LittleEndian.Uint32(data[8*i+4:])}
		}
		blob := data[8*n:]
		if len(blob) > 128 {
			blob = blob[:128]
		}
		s := newSim(t, "wall", nil)
		e := newProgEnv(t, s, 64, newFakeFS(nil, nil).serve, slotcalltest.Options{})
		submit(t, e.v, 0, e.launchCmd(k, grid, block, blob, relocs), 1)
		select {
		case <-e.r.note:
		case <-time.After(20 * time.Millisecond):
		}
		if err := e.v.Close(); err != nil {
			t.Fatal(err)
		}
		got := e.r.all()
		if len(got) != 2 {
			t.Fatalf("%d completions", len(got))
		}
		if c := got[1]; c.Code != abi.OK && c.Code != abi.ErrShutdown && c.Code != abi.ErrDevice && (c.Start != 0 || c.End != 0) {
			t.Fatalf("refused launch ran: %+v", c)
		}
	})
}
