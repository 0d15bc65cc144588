package sim

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// runAll submits cmds on channel 0 one at a time, each run to its end,
// and fails the test unless each completes with its code.
func runAll(t *testing.T, s *Sim, v backend.VM, r *recorder, cmds []abi.Command, codes ...abi.ErrorCode) {
	t.Helper()
	n := len(r.all())
	for i, c := range cmds {
		submit(t, v, 0, c, uint64(n+i))
		run(t, s)
	}
	got := r.all()[n:]
	for i, c := range got {
		want := abi.OK
		if i < len(codes) {
			want = codes[i]
		}
		if c.Code != want {
			t.Errorf("command %d (%v): %v, want %v", i, c.Op, c.Code, want)
		}
	}
}

// keepState fills a VM with a buffer of every kind of page, a module and
// ring claims, keeps it and returns the kept state and the heap.
func keepState(t *testing.T) (backend.Kept, []byte) {
	t.Helper()
	s := manual(t, "memory", "16Mi")
	heap := make([]byte, 4<<10)
	for i := range 1000 {
		heap[i] = byte(i*7 + 1)
	}
	img := copy(heap[2048:], abi.SimModuleImage)
	v, r := attach(t, s, 1, 1, heap)
	runAll(t, s, v, r, []abi.Command{
		{Op: abi.OpAlloc, Handle: 5, Size: 3*pageSize + 100},                                         // data, fill, zeros and a short last page
		{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyHostToDevice, Offset: 10, HeapOff: 0, Length: 1000}, // page 0: data
		{Op: abi.OpMemset, Handle: 5, Offset: pageSize, Length: pageSize, Value: 0xab},               // page 1: a fill page
		{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyHostToDevice, Offset: 3 * pageSize, HeapOff: 0, Length: 100},
		{Op: abi.OpAlloc, Handle: 6, Size: 2 * pageSize},
		{Op: abi.OpCopy, Handle: 6, SrcHandle: 5, Dir: abi.CopyDeviceToDevice, Offset: 0, HeapOff: 0, Length: 2 * pageSize}, // shared pages
		{Op: abi.OpAlloc, Handle: 7, Size: 1},                                                                               // never written
		{Op: abi.OpLoadModule, Handle: 3, Format: abi.ModuleSim, HeapOff: 2048, Length: uint64(img)},
	})
	v.(*simVM).ringCtr.Store(77)
	k, err := v.(backend.Keeper).Keep()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, fd := range k.FDs {
			unix.Close(fd)
		}
	})
	if s.Stats().MemoryUsed != 0 {
		t.Errorf("the keeping sim still counts %d bytes", s.Stats().MemoryUsed)
	}
	return k, heap
}

// A VM kept and adopted by another sim has its buffers, with their
// contents, its module, its memory use and its ring's claim counter: its
// handles work and are in use, and its data reads back the same.
func TestKeepAdopt(t *testing.T) {
	k, heap := keepState(t)
	s := manual(t, "memory", "16Mi")
	r := newRecorder()
	v, err := s.Attach(backend.VMSpec{ID: 9, Channels: 1, Heap: heap, Complete: r.complete, Adopt: &k, RingHead: func() uint64 { return 50 }})
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(3*pageSize + 100 + 2*pageSize + 1)
	if u := v.(backend.MemoryQuota).MemoryUsed(); u != want || s.Stats().MemoryUsed != want {
		t.Errorf("memory used %d (sim %d), want %d", u, s.Stats().MemoryUsed, want)
	}
	if c := v.(*simVM).ringCtr.Load(); c != 77 {
		t.Errorf("claim counter %d, want 77 (the kept one, beyond the head)", c)
	}
	out := make([]byte, len(heap))
	copy(out, heap)
	runAll(t, s, v, r, []abi.Command{
		{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyDeviceToHost, Offset: 0, HeapOff: 1024, Length: 1024},
		{Op: abi.OpAlloc, Handle: 5, Size: 1},
		{Op: abi.OpLoadModule, Handle: 3, Format: abi.ModuleSim, HeapOff: 2048, Length: uint64(len(abi.SimModuleImage))},
		{Op: abi.OpFree, Handle: 7},
	}, abi.OK, abi.ErrBadHandle, abi.ErrBadHandle, abi.OK)
	wantHead := make([]byte, 1024)
	copy(wantHead[10:], out[:1000])
	if !bytes.Equal(heap[1024:2048], wantHead) {
		t.Errorf("buffer 5's first KiB after adoption differs")
	}
	check := func(h uint32, off uint64, want []byte) {
		t.Helper()
		got := make([]byte, len(want))
		v.(*simVM).bufs[h].read(off, got)
		if !bytes.Equal(got, want) {
			t.Errorf("buffer %d at %d: %x..., want %x...", h, off, got[:8], want[:8])
		}
	}
	check(5, pageSize, bytes.Repeat([]byte{0xab}, pageSize))
	check(5, 2*pageSize, make([]byte, pageSize))
	check(5, 3*pageSize, out[:100])
	check(6, pageSize, bytes.Repeat([]byte{0xab}, pageSize))
	check(6, 10, out[:1000])
	if u := v.(backend.MemoryQuota).MemoryUsed(); u != want-1 {
		t.Errorf("after a FREE: %d bytes used, want %d", u, want-1)
	}
}
