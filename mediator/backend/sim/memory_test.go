package sim

import (
	"bytes"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

func TestMemoryData(t *testing.T) {
	s := manual(t)
	heap := make([]byte, 256)
	for i := range 64 {
		heap[i] = byte(i + 1)
	}
	v, r := attach(t, s, 1, 2, heap)
	cmds := []abi.Command{
		{Op: abi.OpAlloc, Handle: 1, Size: 128},
		{Op: abi.OpAlloc, Handle: 2, Size: 128},
		{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, Offset: 10, HeapOff: 0, Length: 64},
		{Op: abi.OpMemset, Handle: 1, Offset: 20, Length: 8, Value: 0xee},
		{Op: abi.OpCopy, Handle: 2, SrcHandle: 1, Dir: abi.CopyDeviceToDevice, Offset: 0, HeapOff: 10, Length: 64},
		{Op: abi.OpCopy, Handle: 2, Dir: abi.CopyDeviceToHost, Offset: 0, HeapOff: 100, Length: 64},
		{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyDeviceToHost, Offset: 120, HeapOff: 200, Length: 8}, // never written: zero
		{Op: abi.OpFree, Handle: 1},
		{Op: abi.OpFree, Handle: 2},
	}
	for i, c := range cmds {
		submit(t, v, i%2, c, uint64(i)) // alternate channels,
		run(t, s)                       // each done before the next
	}
	for _, c := range r.all() {
		if c.Code != abi.OK {
			t.Errorf("%+v", c)
		}
	}
	want := make([]byte, 64)
	for i := range want {
		want[i] = byte(i + 1)
	}
	for i := 10; i < 18; i++ { // buffer bytes 20..27 were memset
		want[i] = 0xee
	}
	if !bytes.Equal(heap[100:164], want) {
		t.Errorf("heap after round trip:\n%v\nwant\n%v", heap[100:164], want)
	}
	if !bytes.Equal(heap[200:208], make([]byte, 8)) {
		t.Errorf("fresh buffer not zero: %v", heap[200:208])
	}
	if u := s.Stats().MemoryUsed; u != 0 {
		t.Errorf("%d bytes still allocated", u)
	}
}

func TestMemoryErrors(t *testing.T) {
	s := manual(t, "memory", "1000")
	heap := make([]byte, 100)
	v, r := attach(t, s, 1, 1, heap)
	attach(t, s, 2, 1, heap)
	tests := []struct {
		name string
		cmd  abi.Command
		code abi.ErrorCode
	}{
		{"alloc", abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 600}, abi.OK},
		{"alloc reuse", abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 1}, abi.ErrBadHandle},
		{"alloc beyond capacity", abi.Command{Op: abi.OpAlloc, Handle: 2, Size: 401}, abi.ErrNoMemory},
		{"alloc to capacity", abi.Command{Op: abi.OpAlloc, Handle: 2, Size: 400}, abi.OK},
		{"alloc none left", abi.Command{Op: abi.OpAlloc, Handle: 3, Size: 1}, abi.ErrNoMemory},
		{"alloc zero", abi.Command{Op: abi.OpAlloc, Handle: 3, Size: 0}, abi.ErrBadRecord},
		{"alloc handle 0", abi.Command{Op: abi.OpAlloc, Handle: 0, Size: 1}, abi.ErrBadHandle},
		{"free unknown", abi.Command{Op: abi.OpFree, Handle: 9}, abi.ErrBadHandle},
		{"memset unknown", abi.Command{Op: abi.OpMemset, Handle: 9, Length: 1}, abi.ErrBadHandle},
		{"memset past end", abi.Command{Op: abi.OpMemset, Handle: 2, Offset: 399, Length: 2}, abi.ErrBufferRange},
		{"memset offset overflow", abi.Command{Op: abi.OpMemset, Handle: 2, Offset: 1 << 63, Length: 1 << 63}, abi.ErrBufferRange},
		{"memset to end", abi.Command{Op: abi.OpMemset, Handle: 2, Offset: 399, Length: 1, Value: 7}, abi.OK},
		{"memset bad value", abi.Command{Op: abi.OpMemset, Handle: 2, Length: 1, Value: 256}, abi.ErrBadRecord},
		{"copy unknown dst", abi.Command{Op: abi.OpCopy, Handle: 9, Dir: abi.CopyHostToDevice, Length: 1}, abi.ErrBadHandle},
		{"copy unknown src", abi.Command{Op: abi.OpCopy, Handle: 1, SrcHandle: 9, Dir: abi.CopyDeviceToDevice, Length: 1}, abi.ErrBadHandle},
		{"copy h2d past buffer", abi.Command{Op: abi.OpCopy, Handle: 2, Dir: abi.CopyHostToDevice, Offset: 350, Length: 51}, abi.ErrBufferRange},
		{"copy h2d past heap", abi.Command{Op: abi.OpCopy, Handle: 2, Dir: abi.CopyHostToDevice, HeapOff: 50, Length: 51}, abi.ErrHeapRange},
		{"copy d2h past heap", abi.Command{Op: abi.OpCopy, Handle: 2, Dir: abi.CopyDeviceToHost, HeapOff: 101, Length: 0}, abi.ErrHeapRange},
		{"copy d2h heap end", abi.Command{Op: abi.OpCopy, Handle: 2, Dir: abi.CopyDeviceToHost, Offset: 399, HeapOff: 99, Length: 1}, abi.OK},
		{"copy d2d past src", abi.Command{Op: abi.OpCopy, Handle: 1, SrcHandle: 2, Dir: abi.CopyDeviceToDevice, HeapOff: 300, Length: 101}, abi.ErrBufferRange},
		{"copy d2d past dst", abi.Command{Op: abi.OpCopy, Handle: 2, SrcHandle: 1, Dir: abi.CopyDeviceToDevice, Offset: 300, Length: 101}, abi.ErrBufferRange},
		{"copy d2d overlapping", abi.Command{Op: abi.OpCopy, Handle: 2, SrcHandle: 2, Dir: abi.CopyDeviceToDevice, Offset: 1, HeapOff: 0, Length: 399}, abi.OK},
		{"copy bad dir", abi.Command{Op: abi.OpCopy, Handle: 2, Dir: 7, Length: 1}, abi.ErrBadRecord},
		{"load module", abi.Command{Op: abi.OpLoadModule, Handle: 1, Format: abi.ModulePTX, Length: 1}, abi.ErrUnsupported},
		{"launch without a module", abi.Command{Op: abi.OpLaunch, Handle: 1}, abi.ErrBadHandle},
		{"bad opcode", abi.Command{Op: 0}, abi.ErrBadOpcode},
		{"bad opcode high", abi.Command{Op: 999}, abi.ErrBadOpcode},
		{"free", abi.Command{Op: abi.OpFree, Handle: 1}, abi.OK},
		{"free twice", abi.Command{Op: abi.OpFree, Handle: 1}, abi.ErrBadHandle},
		{"alloc after free", abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 600}, abi.OK},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Clock().Now()
			submit(t, v, 0, tc.cmd, uint64(i))
			run(t, s)
			got := r.all()
			c := got[len(got)-1]
			if c.Tag != uint64(i) || c.Code != tc.code {
				t.Fatalf("got %+v, want code %v", c, tc.code)
			}
			if tc.code != abi.OK && (c.Start != 0 || c.End != 0 || s.Clock().Now() != before) {
				t.Errorf("failed command ran: %+v, clock %d -> %d", c, before, s.Clock().Now())
			}
		})
	}
	if heap[99] != 7 {
		t.Errorf("heap[99] = %d, want 7", heap[99])
	}
	// Handles are per VM: VM 2 sees none of VM 1's buffers.
	v2 := s.vms[2]
	if len(v2.bufs) != 0 {
		t.Errorf("VM 2 has buffers %v", v2.bufs)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if u := s.Stats().MemoryUsed; u != 0 {
		t.Errorf("after Close %d bytes still allocated", u)
	}
}

func TestBuffersArePerVM(t *testing.T) {
	s := manual(t)
	v1, _ := attach(t, s, 1, 1, nil)
	v2, r2 := attach(t, s, 2, 1, make([]byte, 8))
	submit(t, v1, 0, abi.Command{Op: abi.OpAlloc, Handle: 5, Size: 8}, 0)
	submit(t, v2, 0, abi.Command{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyDeviceToHost, Length: 8}, 1)
	submit(t, v2, 0, abi.Command{Op: abi.OpAlloc, Handle: 5, Size: 8}, 2) // same handle, other VM: fine
	run(t, s)
	got := r2.all()
	if got[0].Code != abi.ErrBadHandle || got[1].Code != abi.OK {
		t.Errorf("%+v", got)
	}
}

var _ backend.VM = (*simVM)(nil)

// TestMemoryQuota: a VM's ALLOCs past its quota fail with ErrNoMemory, the
// VM goes on, FREE gives the quota back, another VM is untouched, and a
// quota lowered below the use blocks new ALLOCs until enough is freed.
func TestMemoryQuota(t *testing.T) {
	s := manual(t, "memory", "10000")
	r1, r2 := newRecorder(), newRecorder()
	v1, err := s.Attach(backend.VMSpec{ID: 1, Channels: 1, MemoryQuota: 1000, Complete: r1.complete})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := s.Attach(backend.VMSpec{ID: 2, Channels: 1, Complete: r2.complete})
	if err != nil {
		t.Fatal(err)
	}
	q1 := v1.(backend.MemoryQuota)
	step := func(v backend.VM, r *recorder, c abi.Command, want abi.ErrorCode) {
		t.Helper()
		n := len(r.all())
		submit(t, v, 0, c, uint64(n))
		run(t, s)
		got := r.all()
		if len(got) != n+1 || got[n].Code != want {
			t.Fatalf("%v %d bytes, handle %d: got %+v, want %v", c.Op, c.Size, c.Handle, got[n:], want)
		}
	}
	alloc := func(h uint32, n uint64) abi.Command { return abi.Command{Op: abi.OpAlloc, Handle: h, Size: n} }
	free := func(h uint32) abi.Command { return abi.Command{Op: abi.OpFree, Handle: h} }

	step(v1, r1, alloc(1, 600), abi.OK)
	step(v1, r1, alloc(2, 401), abi.ErrNoMemory) // 1001 > 1000
	step(v1, r1, alloc(2, 400), abi.OK)          // exactly the quota
	step(v1, r1, alloc(3, 1), abi.ErrNoMemory)
	step(v1, r1, abi.Command{Op: abi.OpMemset, Handle: 2, Length: 400, Value: 1}, abi.OK) // still works
	step(v2, r2, alloc(1, 5000), abi.OK)                                                  // VM 2 has no quota
	if u := q1.MemoryUsed(); u != 1000 {
		t.Errorf("VM 1 uses %d, want 1000", u)
	}
	step(v1, r1, free(1), abi.OK)
	if u := q1.MemoryUsed(); u != 400 {
		t.Errorf("VM 1 uses %d after a free, want 400", u)
	}
	step(v1, r1, alloc(3, 600), abi.OK) // the quota came back

	q1.SetMemoryQuota(500) // below the 1000 held: nothing is taken back
	if u := q1.MemoryUsed(); u != 1000 {
		t.Errorf("VM 1 uses %d after its quota was lowered, want 1000", u)
	}
	step(v1, r1, alloc(4, 1), abi.ErrNoMemory)
	step(v1, r1, free(3), abi.OK) // 400 held: under 500
	step(v1, r1, alloc(4, 101), abi.ErrNoMemory)
	step(v1, r1, alloc(4, 100), abi.OK)
	q1.SetMemoryQuota(0) // none: the backend's capacity (10000 - 5000 of VM 2's)
	step(v1, r1, alloc(5, 4500), abi.OK)
	step(v1, r1, alloc(6, 1), abi.ErrNoMemory)
	if u := s.Stats().MemoryUsed; u != 10000 {
		t.Errorf("backend uses %d, want 10000", u)
	}
	if err := v1.Close(); err != nil {
		t.Fatal(err)
	}
	if u := s.Stats().MemoryUsed; u != 5000 {
		t.Errorf("after VM 1's Close the backend uses %d, want VM 2's 5000", u)
	}
}
