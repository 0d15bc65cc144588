package sim

import (
	"bytes"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// gate holds every data movement of s until release is closed.
func gate(s *Sim) (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.beforeMove = func() { <-ch }
	s.mu.Unlock()
	return func() { close(ch) }
}

// TestMoveHoldsItsEngine: with the wall clock, a MEMSET whose data the
// host has not moved by its modelled End runs on, its engine busy, until
// the data has moved (held here for as long as the test likes), and is
// billed that: VM B's kernels behind it on the compute engine wait for
// it, as they would for a GPU's slow MEMSET, while B's COPY on the copy
// engine moves and completes meanwhile (data moved under the backend's
// lock would stop it dead and fail the test at its deadline). So no
// command is ever in flight on an idle engine: arbitration turns, which
// give the GPU to one VM at a time, charge a VM what its commands held it.
func TestMoveHoldsItsEngine(t *testing.T) {
	s := newSim(t, "wall", nil)
	heap := make([]byte, 4096)
	a, ra := attach(t, s, 1, 1, nil)
	b, rb := attach(t, s, 2, 2, heap)
	submit(t, a, 0, abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 1 << 20}, 0)
	submit(t, b, 0, abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 4096}, 0)
	ra.wait(t, 1)
	rb.wait(t, 1)
	held, unblock := make(chan struct{}), make(chan struct{})
	var released sync.Once
	release := func() { released.Do(func() { close(unblock) }) }
	t.Cleanup(release) // before the sim's Close, which waits for the mover
	var first atomic.Bool
	s.mu.Lock()
	s.beforeMove = func() { // holds the first movement: A's MEMSET
		if first.CompareAndSwap(false, true) {
			close(held)
			<-unblock
		}
	}
	s.mu.Unlock()
	memset := abi.Command{Op: abi.OpMemset, Handle: 1, Offset: 1, Length: 1<<20 - 1, Value: 9}
	submit(t, a, 0, memset, 1)
	submit(t, a, 0, abi.Command{Op: abi.OpNop}, 2) // behind the MEMSET on its channel
	<-held
	const kernels = 20
	for i := range kernels {
		submit(t, b, 0, throttle(10*us), uint64(10+i))
	}
	submit(t, b, 1, abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyDeviceToHost, Length: 4096}, 1)
	if c := rb.wait(t, 2)[1]; c.Tag != 1 || c.Code != abi.OK {
		t.Fatalf("B's first completion while A's MEMSET is held: %+v, want its COPY", c)
	}
	var st backend.Status
	s.ReadStatus(&st)
	if !slices.ContainsFunc(st.Running, func(r backend.Running) bool {
		return r.ChannelRef == backend.ChannelRef{VM: 1, Channel: 0} && r.Engine == int(Compute)
	}) {
		t.Errorf("running while A's MEMSET's data is held: %+v, want A's channel on the compute engine", st.Running)
	}
	const hold = 20 * time.Millisecond
	time.Sleep(hold)
	if n := len(rb.all()); n != 2 {
		t.Fatalf("B has %d completions while A's MEMSET holds the compute engine, want 2 (the ALLOC and the COPY)", n)
	}
	if n := len(ra.all()); n != 1 {
		t.Fatalf("A has %d completions while its MEMSET's data has not moved, want 1 (the ALLOC)", n)
	}
	if busy := s.VMBusy(1); busy < int64(hold) {
		t.Errorf("A's busy time %d ns while its MEMSET runs on, want %v at least", busy, hold)
	}
	release()
	done := ra.wait(t, 3)
	got := rb.wait(t, 2+kernels)
	p := s.Params()
	m := done[1]
	if m.Code != abi.OK || m.End-m.Start < int64(hold) || m.End-m.Start <= p.Cost(&memset) {
		t.Errorf("MEMSET %+v ran %d ns: want it to run until its data moved, %v at least", m, m.End-m.Start, hold)
	}
	if done[2].Tag != 2 || done[2].Start < m.End {
		t.Errorf("the NOP %+v did not wait for the MEMSET %+v", done[2], m)
	}
	var billed int64
	for _, c := range done {
		billed += c.End - c.Start
	}
	if busy := s.VMBusy(1); busy != billed {
		t.Errorf("A's busy time %d ns, want what its completions span, %d", busy, billed)
	}
	for _, c := range got[2:] {
		if c.Code != abi.OK || c.End-c.Start != 10*us || c.Start < m.End {
			t.Fatalf("B's kernel %+v: want 10 µs, after the MEMSET %+v", c, m)
		}
	}
}

// TestFreeRacingCopy: a FREE on another channel while a COPY out of the
// same buffer is still moving gives the quota back at once (an ALLOC
// behind it gets it), and completes after the COPY, whose movement comes
// first in the VM's mover (the device file records them in the order they
// started); the COPY ends on the buffer it started with, and the heap gets
// its data.
func TestFreeRacingCopy(t *testing.T) {
	s := newSim(t, "wall", nil)
	heap := make([]byte, 4096)
	r := newRecorder()
	v, err := s.Attach(backend.VMSpec{ID: 1, Channels: 2, Heap: heap, MemoryQuota: 8192, Complete: r.complete})
	if err != nil {
		t.Fatal(err)
	}
	submit(t, v, 0, abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 8192}, 0)
	submit(t, v, 0, abi.Command{Op: abi.OpMemset, Handle: 1, Length: 4096, Value: 5}, 1)
	r.wait(t, 2)
	release := gate(s)
	submit(t, v, 0, abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyDeviceToHost, Length: 4096}, 2)
	submit(t, v, 1, abi.Command{Op: abi.OpFree, Handle: 1}, 3)
	submit(t, v, 1, abi.Command{Op: abi.OpAlloc, Handle: 2, Size: 8192}, 4) // the freed quota
	time.Sleep(20 * time.Millisecond)
	if got := r.all(); len(got) != 2 {
		t.Fatalf("completions while the COPY's data is held: %+v", got[2:])
	}
	release()
	got := r.wait(t, 5)
	for _, c := range got {
		if c.Code != abi.OK {
			t.Errorf("%+v", c)
		}
	}
	if got[2].Tag != 2 {
		t.Errorf("first after the release %+v, want the COPY", got[2])
	}
	if !bytes.Equal(heap, bytes.Repeat([]byte{5}, 4096)) {
		t.Error("the COPY of the freed buffer did not reach the heap")
	}
}

// TestLazyAllocation: a 64 GiB ALLOC within the VM's quota takes no host
// memory; untouched memory reads as zeros; a MEMSET of whole pages and a
// COPY of them between buffers take none either; bytes written read back.
func TestLazyAllocation(t *testing.T) {
	const size = 64 << 30
	s := manual(t, "memory", "128Gi")
	heap := make([]byte, 1<<20)
	r := newRecorder()
	v, err := s.Attach(backend.VMSpec{ID: 1, Channels: 1, Heap: heap, MemoryQuota: 2 * size, Complete: r.complete})
	if err != nil {
		t.Fatal(err)
	}
	before := heapInUse()
	cmds := []abi.Command{
		{Op: abi.OpAlloc, Handle: 1, Size: size},
		{Op: abi.OpAlloc, Handle: 2, Size: size},
		{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyDeviceToHost, Offset: size - 1<<20, Length: 1 << 20}, // untouched
		{Op: abi.OpMemset, Handle: 1, Offset: 1 << 30, Length: 1 << 30, Value: 7},                     // whole pages
		{Op: abi.OpCopy, Handle: 2, SrcHandle: 1, Dir: abi.CopyDeviceToDevice, Offset: 0, HeapOff: 1 << 30, Length: 1 << 30},
	}
	for i, c := range cmds {
		copy(heap, "garbage")
		submit(t, v, 0, c, uint64(i))
		run(t, s)
		if i == 2 && !bytes.Equal(heap, make([]byte, len(heap))) {
			t.Fatal("untouched device memory did not read as zeros")
		}
	}
	for _, c := range r.all() {
		if c.Code != abi.OK {
			t.Fatalf("%+v", c)
		}
	}
	if grew := heapInUse() - before; grew > 64<<20 {
		t.Errorf("two 64 GiB buffers, a 1 GiB MEMSET and a 1 GiB COPY took %d MiB of host memory", grew>>20)
	}
	// Data written at the far end of the buffer reads back, through a
	// device-to-device copy at an unaligned offset.
	copy(heap, "far end")
	for i, c := range []abi.Command{
		{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, Offset: size - 7, Length: 7},
		{Op: abi.OpCopy, Handle: 2, SrcHandle: 1, Dir: abi.CopyDeviceToDevice, Offset: 3, HeapOff: size - 7, Length: 7},
		{Op: abi.OpCopy, Handle: 2, Dir: abi.CopyDeviceToHost, Offset: 0, HeapOff: 100, Length: 10},
		{Op: abi.OpCopy, Handle: 2, Dir: abi.CopyDeviceToHost, Offset: 1<<30 - 2, HeapOff: 200, Length: 4},
	} {
		submit(t, v, 0, c, uint64(10+i))
		run(t, s)
	}
	if got := string(heap[100:110]); got != "\x07\x07\x07far end" { // 0..3 came from the MEMSET
		t.Errorf("read back %q", got)
	}
	if got := heap[200:204]; !bytes.Equal(got, []byte{7, 7, 0, 0}) { // the copied MEMSET's end
		t.Errorf("the copied MEMSET reads %v", got)
	}
	if u := q(v).MemoryUsed(); u != 2*size {
		t.Errorf("the VM uses %d, want %d", u, uint64(2*size))
	}
}

func q(v backend.VM) backend.MemoryQuota { return v.(backend.MemoryQuota) }

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
