package cuda

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

// FuzzLaunch feeds LAUNCH hostile argument blobs and relocations (the guest
// writes them into its heap) on the fake driver: the backend must answer
// with a channel error code, never panic, never write the guest's heap, and
// hand the driver only relocated arguments that point into the VM's own
// buffer or heap.
func FuzzLaunch(f *testing.F) {
	args := make([]byte, 24)
	le.PutUint64(args, 3)
	reloc := make([]byte, 16)
	le.PutUint32(reloc[0:], 0)
	le.PutUint32(reloc[4:], abi.RelocBuffer)
	le.PutUint32(reloc[8:], 8)
	le.PutUint32(reloc[12:], abi.RelocHeap)
	f.Add(args, reloc, uint32(2))
	f.Add([]byte{}, []byte{}, uint32(0))
	f.Add(make([]byte, 8), []byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0}, uint32(1))
	f.Fuzz(func(t *testing.T, args, relocs []byte, nrel uint32) {
		if len(args) > abi.MaxArgsLen || nrel > abi.MaxRelocs {
			return // the ABI decoder refuses these before a backend sees them
		}
		r := newRig(t, nil)
		heap, load, launch := launchHeap(".entry k(\n)", "k", args, nil)
		at := 4200 + (len(args)+7)&^7
		if at <= len(heap) { // else the table lies past the heap: the backend refuses it
			copy(heap[at:], relocs)
		}
		launch.Relocs = nrel
		vm := r.attach(1, 1, heap)
		r.submit(vm, 0, abi.Command{Op: abi.OpAlloc, Handle: 3, Size: 64}, 0)
		r.submit(vm, 0, load, 1)
		before := append([]byte(nil), heap...)
		if err := vm.Submit(0, launch, 2); err != nil {
			t.Fatalf("submit: %v", err)
		}
		got := wait(t, r.done, 3)
		switch c := got[2].Code; c {
		case abi.OK, abi.ErrBadRecord, abi.ErrBadHandle, abi.ErrHeapRange:
		default:
			t.Fatalf("LAUNCH answered %v", c)
		}
		r.f.mu.Lock()
		same := string(before) == string(heap)
		r.f.mu.Unlock()
		if !same {
			t.Fatal("LAUNCH wrote the guest's heap")
		}
		if got[2].Code != abi.OK {
			return
		}
		var l *fakeLaunch
		launches := r.f.launched()
		for i := range launches {
			if launches[i].name == "k" {
				l = &launches[i]
			}
		}
		if l == nil || len(l.args) != len(args) {
			t.Fatalf("launched %+v", l)
		}
		// Every relocated word now points into buffer 3 or the heap.
		w := r.w(vm)
		for i := 0; i+abi.RelocSize <= int(nrel)*abi.RelocSize && i+abi.RelocSize <= len(relocs); i += abi.RelocSize {
			off := le.Uint32(relocs[i:])
			p := devptr(le.Uint64(l.args[off:]))
			inBuf := p == w.bufs[3].ptr
			inHeap := p >= w.heapDev && p < w.heapDev+devptr(len(heap))
			if !inBuf && !inHeap {
				// A later relocation may have rewritten the same word:
				// only the last one at an offset counts.
				last := true
				for j := i + abi.RelocSize; j+abi.RelocSize <= int(nrel)*abi.RelocSize && j+abi.RelocSize <= len(relocs); j += abi.RelocSize {
					if le.Uint32(relocs[j:]) == off {
						last = false
					}
				}
				if last {
					t.Fatalf("relocated argument at %d is %#x: outside the VM's buffer and heap", off, p)
				}
			}
		}
	})
}
