package cuda

import (
	"debug/elf"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/backend/cuda/cubin"
	"github.com/sluice-gpu/sluice/mediator/backend/cuda/cubin/cubintest"
	"golang.org/x/sys/unix"
)

// rig is a backend on the fake driver with collected completions.
type rig struct {
	t    *testing.T
	f    *fakeDriver
	p    *inProcess
	b    *Backend
	done chan backend.Completion
}

func newRig(t *testing.T, params map[string]string) *rig {
	t.Helper()
	f := newFake()
	p := &inProcess{d: f}
	b, err := open(f, backend.Options{Clock: "wall", Params: params}, p.spawn)
	if err != nil {
		t.Fatal(err)
	}
	b.KeepGroundTruth()
	r := &rig{t: t, f: f, p: p, b: b, done: make(chan backend.Completion, 1024)}
	t.Cleanup(func() {
		_ = b.Close()
		if n := f.wrongContexts(); n != 0 {
			t.Errorf("%d driver calls with the wrong context current", n)
		}
	})
	return r
}

func (r *rig) attach(id uint32, channels int, heap []byte) *cudaVM {
	r.t.Helper()
	return r.attachTo(id, channels, heap, r.done)
}

func (r *rig) attachTo(id uint32, channels int, heap []byte, done chan backend.Completion) *cudaVM {
	r.t.Helper()
	vm, err := r.b.Attach(backend.VMSpec{ID: id, Name: "vm", Channels: channels, Heap: heap,
		Complete: func(c backend.Completion) { done <- c }})
	if err != nil {
		r.t.Fatal(err)
	}
	return vm.(*cudaVM)
}

// w is vm's current worker.
func (r *rig) w(vm *cudaVM) *worker { return r.p.worker(vm.id) }

// settle waits until vm's worker has issued everything sent to it.
func (r *rig) settle(vm *cudaVM) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		vm.mu.Lock()
		tail := vm.tail
		vm.mu.Unlock()
		if vm.blk.load(offHead) == tail {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the worker took no commands for 10s (head %d, tail %d)", vm.blk.load(offHead), tail)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (r *rig) submit(vm *cudaVM, ch int, c abi.Command, tag uint64) {
	r.t.Helper()
	if err := vm.Submit(ch, c, tag); err != nil {
		r.t.Fatalf("submit %v: %v", c.Op, err)
	}
}

// wait collects n completions.
func wait(t *testing.T, done chan backend.Completion, n int) []backend.Completion {
	t.Helper()
	var out []backend.Completion
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case c := <-done:
			out = append(out, c)
		case <-timeout:
			t.Fatalf("%d of %d completions after 10s: %+v", len(out), n, out)
		}
	}
	return out
}

// codes checks completions' tags come in order with the given codes.
func codes(t *testing.T, got []backend.Completion, want ...abi.ErrorCode) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d completions, want %d", len(got), len(want))
	}
	for i, c := range got {
		if c.Tag != uint64(i) {
			t.Errorf("completion %d has tag %d: out of order", i, c.Tag)
		}
		if c.Code != want[i] {
			t.Errorf("completion %d (%v): code %v, want %v", i, c.Op, c.Code, want[i])
		}
		if c.Code == abi.OK && c.End < c.Start {
			t.Errorf("completion %d ends before it starts: %d < %d", i, c.End, c.Start)
		}
	}
}

func TestOpenOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts backend.Options
	}{
		{"virtual clock", backend.Options{Clock: "virtual"}},
		{"unknown key", backend.Options{Params: map[string]string{"speed": "9"}}},
		{"bad device", backend.Options{Params: map[string]string{"device": "-1"}}},
		{"bad gap", backend.Options{Params: map[string]string{"gap_ns": "0"}}},
		{"bad stall", backend.Options{Params: map[string]string{"stall_check": "soon"}}},
		{"bad restart delay", backend.Options{Params: map[string]string{"restart_delay": "-1s"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := open(newFake(), tc.opts, nil); !errors.Is(err, backend.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
}

// TestGroundTruthOnlyWhenAsked: a backend keeps no THROTTLE records (up to
// 96 MiB a VM, grown in the completer's sweep) unless the benchmarks asked
// for them, for the VMs attached after.
func TestGroundTruthOnlyWhenAsked(t *testing.T) {
	r := newRig(t, nil)
	r.b.keepTruth.Store(false) // as sluiced opens it
	a := r.attach(1, 1, make([]byte, 4096))
	r.submit(a, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 1500}, 0)
	codes(t, wait(t, r.done, 1), abi.OK)
	if ns, kernels, ok := r.b.GroundTruth(1); !ok || ns != 0 || kernels != 0 {
		t.Fatalf("unasked: ground truth %d ns, %d kernels, %v; want none kept", ns, kernels, ok)
	}
	r.b.KeepGroundTruth()
	b := r.attach(2, 1, make([]byte, 4096))
	r.submit(b, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 1500}, 0)
	codes(t, wait(t, r.done, 1), abi.OK)
	if ns, kernels, _ := r.b.GroundTruth(2); ns != 1500 || kernels != 1 {
		t.Fatalf("asked: ground truth %d ns, %d kernels; want 1500, 1", ns, kernels)
	}
}

func TestThrottleGroundTruthAndOrder(t *testing.T) {
	r := newRig(t, nil)
	vm := r.attach(1, 2, make([]byte, 4096))
	r.submit(vm, 0, abi.Command{Op: abi.OpNop}, 0)
	r.submit(vm, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 1500}, 1)
	r.submit(vm, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 2500}, 2)
	r.submit(vm, 0, abi.Command{Op: abi.OpFence, Value: 9}, 3)
	codes(t, wait(t, r.done, 4), abi.OK, abi.OK, abi.OK, abi.OK)
	ns, kernels, ok := r.b.GroundTruth(1)
	if !ok || ns != 4000 || kernels != 2 {
		t.Fatalf("ground truth %d ns, %d kernels, %v; want 4000, 2", ns, kernels, ok)
	}
	if _, _, ok := r.b.GroundTruth(2); ok {
		t.Fatal("ground truth for a VM never attached")
	}
	// The throttle got the channel's record, its duration and the gap.
	var seen bool
	w := r.w(vm)
	for _, l := range r.f.launched() {
		if l.name == throttleName {
			seen = true
			seq := le.Uint64(l.args[24:])
			if rec := devptr(le.Uint64(l.args)); rec != w.chans[0].dev+devptr(w.blk.l.slotOff(seq)) {
				t.Errorf("throttle record %#x, want channel 0's slot for %d", rec, seq)
			}
			if start := devptr(le.Uint64(l.args[32:])); start != w.chans[0].dev+offStart {
				t.Errorf("throttle start marker %#x, want channel 0's", start)
			}
			if gap := le.Uint64(l.args[16:]); gap != DefaultGapNs {
				t.Errorf("gap %d", gap)
			}
		}
	}
	if !seen {
		t.Fatal("no throttle kernel launched")
	}
}

func TestBuffersAndCopies(t *testing.T) {
	r := newRig(t, nil)
	heap := make([]byte, 4096)
	copy(heap[100:], "hello, device") // before the worker starts: the guest's part
	vm := r.attach(1, 1, heap)
	cmds := []struct {
		c    abi.Command
		want abi.ErrorCode
	}{
		{abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 64}, abi.OK},
		{abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 64}, abi.ErrBadHandle}, // reused
		{abi.Command{Op: abi.OpAlloc, Handle: 2, Size: 64}, abi.OK},
		{abi.Command{Op: abi.OpMemset, Handle: 1, Offset: 0, Length: 64, Value: 'x'}, abi.OK},
		{abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, Offset: 4, HeapOff: 100, Length: 13}, abi.OK},
		{abi.Command{Op: abi.OpCopy, Handle: 2, Dir: abi.CopyDeviceToDevice, SrcHandle: 1, Offset: 0, HeapOff: 0, Length: 32}, abi.OK},
		{abi.Command{Op: abi.OpCopy, Handle: 2, Dir: abi.CopyDeviceToHost, Offset: 0, HeapOff: 200, Length: 32}, abi.OK},
		{abi.Command{Op: abi.OpCopy, Handle: 2, Dir: abi.CopyDeviceToHost, Offset: 60, HeapOff: 0, Length: 8}, abi.ErrBufferRange},
		{abi.Command{Op: abi.OpCopy, Handle: 2, Dir: abi.CopyDeviceToHost, Offset: 0, HeapOff: 4090, Length: 8}, abi.ErrHeapRange},
		{abi.Command{Op: abi.OpCopy, Handle: 3, Dir: abi.CopyDeviceToHost, Length: 8}, abi.ErrBadHandle},
		{abi.Command{Op: abi.OpMemset, Handle: 1, Offset: 63, Length: 2}, abi.ErrBufferRange},
		{abi.Command{Op: abi.OpFree, Handle: 1}, abi.OK},
		{abi.Command{Op: abi.OpMemset, Handle: 1, Length: 1}, abi.ErrBadHandle}, // freed
		{abi.Command{Op: abi.OpFree, Handle: 1}, abi.ErrBadHandle},
		{abi.Command{Op: abi.OpNop}, abi.OK},
	}
	var want []abi.ErrorCode
	for i, c := range cmds {
		r.submit(vm, 0, c.c, uint64(i))
		want = append(want, c.want)
	}
	codes(t, wait(t, r.done, len(cmds)), want...)
	// The fake copied under its lock; the markers that order the copy before
	// the completion are in a mapping, where the race detector sees no
	// synchronization.
	r.f.mu.Lock()
	got := string(heap[200:232])
	r.f.mu.Unlock()
	if exp := "xxxxhello, devicexxxxxxxxxxxxxxx"; got != exp {
		t.Fatalf("heap after the round trip: %q, want %q", got, exp)
	}
	// Refused commands never reach the GPU: 6 issued with work + 2 NOP-like.
	if n := r.f.counted("MemcpyDtoHAsync"); n != 1 {
		t.Errorf("%d device-to-host copies issued, want 1", n)
	}
}

func TestAllocOutOfMemory(t *testing.T) {
	r := newRig(t, nil)
	vm := r.attach(1, 1, nil)
	r.f.setErr(&r.f.allocErr, cudaErrorOutOfMemory)
	r.submit(vm, 0, abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 1 << 40}, 0)
	r.submit(vm, 0, abi.Command{Op: abi.OpMemset, Handle: 1, Length: 1}, 1)
	codes(t, wait(t, r.done, 2), abi.ErrNoMemory, abi.ErrBadHandle)
}

// TestMemoryQuota: the worker refuses an ALLOC past the VM's quota with
// ErrNoMemory before it reaches the driver, the VM goes on, FREE gives the
// quota back, another VM is untouched, and a quota lowered below the use
// blocks ALLOCs until enough is freed.
func TestMemoryQuota(t *testing.T) {
	r := newRig(t, nil)
	doneA, doneB := make(chan backend.Completion, 64), make(chan backend.Completion, 64)
	va, err := r.b.Attach(backend.VMSpec{ID: 1, Name: "a", Channels: 1, MemoryQuota: 1000,
		Complete: func(c backend.Completion) { doneA <- c }})
	if err != nil {
		t.Fatal(err)
	}
	a := va.(*cudaVM)
	b := r.attachTo(2, 1, nil, doneB)
	var tag uint64
	step := func(vm *cudaVM, done chan backend.Completion, c abi.Command, want abi.ErrorCode) {
		t.Helper()
		r.submit(vm, 0, c, tag)
		got := wait(t, done, 1)[0]
		if got.Code != want {
			t.Fatalf("%v %d bytes, handle %d: code %v, want %v", c.Op, c.Size, c.Handle, got.Code, want)
		}
		tag++
	}
	alloc := func(h uint32, n uint64) abi.Command { return abi.Command{Op: abi.OpAlloc, Handle: h, Size: n} }
	free := func(h uint32) abi.Command { return abi.Command{Op: abi.OpFree, Handle: h} }
	allocs := func() int { return r.f.counted("MemAllocAsync") }

	step(a, doneA, alloc(1, 600), abi.OK)
	step(a, doneA, alloc(2, 401), abi.ErrNoMemory)
	step(a, doneA, alloc(2, 400), abi.OK)
	n := allocs()
	step(a, doneA, alloc(3, 1), abi.ErrNoMemory)
	if allocs() != n {
		t.Error("an ALLOC past the quota reached the driver")
	}
	step(a, doneA, abi.Command{Op: abi.OpMemset, Handle: 2, Length: 400, Value: 1}, abi.OK) // the VM goes on
	step(b, doneB, alloc(1, 1<<20), abi.OK)                                                 // VM b has no quota
	if u := a.MemoryUsed(); u != 1000 {
		t.Errorf("VM a uses %d, want 1000", u)
	}
	if u := b.MemoryUsed(); u != 1<<20 {
		t.Errorf("VM b uses %d, want %d", u, 1<<20)
	}
	step(a, doneA, free(1), abi.OK)
	if u := a.MemoryUsed(); u != 400 {
		t.Errorf("VM a uses %d after a free, want 400", u)
	}
	step(a, doneA, alloc(3, 600), abi.OK)
	a.SetMemoryQuota(500) // below the 1000 held
	step(a, doneA, alloc(4, 1), abi.ErrNoMemory)
	step(a, doneA, free(3), abi.OK)
	step(a, doneA, alloc(4, 101), abi.ErrNoMemory)
	step(a, doneA, alloc(4, 100), abi.OK)
	a.SetMemoryQuota(0)
	step(a, doneA, alloc(5, 1<<30), abi.OK)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if u := a.MemoryUsed(); u != 0 {
		t.Errorf("a closed VM uses %d", u)
	}
}

// quotaVM attaches VM 1 with heap and quota, and returns it with a step
// that submits a command on channel 0 and checks its code.
func (r *rig) quotaVM(heap []byte, quota uint64) (*cudaVM, func(abi.Command, abi.ErrorCode)) {
	t := r.t
	done := make(chan backend.Completion, 64)
	va, err := r.b.Attach(backend.VMSpec{ID: 1, Name: "a", Channels: 1, MemoryQuota: quota, Heap: heap,
		Complete: func(c backend.Completion) { done <- c }})
	if err != nil {
		t.Fatal(err)
	}
	a := va.(*cudaVM)
	var tag uint64
	return a, func(c abi.Command, want abi.ErrorCode) {
		t.Helper()
		r.submit(a, 0, c, tag)
		tag++
		if got := wait(t, done, 1)[0]; got.Code != want {
			t.Fatalf("%v handle %d at %d: code %v, want %v", c.Op, c.Handle, c.HeapOff, got.Code, want)
		}
	}
}

// TestModuleQuota: what a module takes of device memory (its globals,
// constants and code) counts against the VM's quota as a buffer does,
// measured before the driver loads it: PTX through the driver's linker, a
// cubin as it is; a fatbin is refused, and so is a module past
// maxModules.
func TestModuleQuota(t *testing.T) {
	r := newRig(t, nil)
	const small, big, mid, fat, junk, name, huge = 0, 4096, 8192, 16384, 20480, 24576, 28672
	heap := make([]byte, 32768)
	smallPTX := ".entry k(\n)"
	bigPTX := ".entry k(\n)\n.global .align 8 .b8 big[2097152];"
	copy(heap[small:], smallPTX)
	copy(heap[big:], bigPTX)
	midCubin := cubintest.Build(cubintest.Image{Sections: []cubintest.Section{cubintest.Kernel("k"), cubintest.Global(512 << 10)}})
	copy(heap[mid:], midCubin)
	le.PutUint32(heap[fat:], 0xBA55ED50)
	copy(heap[junk:], "not a cubin")
	copy(heap[name:], "k")
	hugeCubin := cubintest.Build(cubintest.Image{Sections: []cubintest.Section{cubintest.Kernel("k")},
		Segments: []cubintest.Segment{{Type: elf.PT_LOAD, Memsz: 1 << 62}, {Type: elf.PT_LOAD, Memsz: 1 << 62}}})
	copy(heap[huge:], hugeCubin)
	a, step := r.quotaVM(heap, 1<<20)
	load := func(h uint32, format uint32, off, n int) abi.Command {
		return abi.Command{Op: abi.OpLoadModule, Handle: h, Format: format, HeapOff: uint64(off), Length: uint64(n)}
	}
	launch := func(h uint32) abi.Command {
		return abi.Command{Op: abi.OpLaunch, Handle: h, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, NameOff: name, NameLen: 1}
	}
	smallSize := fakeFootprint(smallPTX)
	midSize, err := cubin.Footprint(midCubin)
	if err != nil {
		t.Fatal(err)
	}

	step(load(1, abi.ModulePTX, small, len(smallPTX)), abi.OK)
	if u := a.MemoryUsed(); u != smallSize {
		t.Fatalf("a module of code alone: the VM uses %d, want %d", u, smallSize)
	}
	loads := r.f.counted("ModuleLoadData")
	step(load(2, abi.ModulePTX, big, len(bigPTX)), abi.ErrNoMemory) // 2 MiB of globals
	if r.f.counted("ModuleLoadData") != loads {
		t.Error("a module past the quota reached the driver's loader")
	}
	step(launch(2), abi.ErrBadHandle)
	step(load(2, abi.ModuleCubin, mid, len(midCubin)), abi.OK) // 512 KiB of globals
	if u := a.MemoryUsed(); u != smallSize+midSize {
		t.Fatalf("two modules: the VM uses %d, want %d", u, smallSize+midSize)
	}
	step(launch(2), abi.OK)
	step(load(3, abi.ModuleCubin, fat, 64), abi.ErrUnsupported)
	step(load(3, abi.ModuleCubin, junk, 11), abi.ErrBadRecord)
	step(abi.Command{Op: abi.OpAlloc, Handle: 9, Size: 1<<20 - smallSize - midSize + 1}, abi.ErrNoMemory)
	step(abi.Command{Op: abi.OpAlloc, Handle: 9, Size: 1<<20 - smallSize - midSize}, abi.OK)

	// Without a quota, the module table and the device are the bounds: a
	// cubin that claims more than the GPU has is refused, not counted.
	a.SetMemoryQuota(0)
	used := a.MemoryUsed()
	step(load(3, abi.ModuleCubin, huge, len(hugeCubin)), abi.ErrNoMemory)
	step(abi.Command{Op: abi.OpAlloc, Handle: 10, Size: 1 << 50}, abi.ErrNoMemory)
	if u := a.MemoryUsed(); u != used {
		t.Fatalf("refusals moved the VM's use from %d to %d", used, u)
	}
	for h := range uint32(maxModules - 2) { // 1 and 2 are loaded
		step(load(10+h, abi.ModulePTX, small, len(smallPTX)), abi.OK)
	}
	step(load(1<<19, abi.ModulePTX, small, len(smallPTX)), abi.ErrNoMemory)
	step(launch(2), abi.OK) // the VM goes on
}

// TestLocalMemoryQuota: the local memory the driver holds for a kernel's
// threads (its local bytes for every thread the device runs at once, kept
// at the most any launch used) counts against the VM's quota, charged at
// the launch that grows it; a launch that grows nothing is never refused.
func TestLocalMemoryQuota(t *testing.T) {
	r := newRig(t, nil)
	const m16, m32, name16, name32 = 0, 4096, 8192, 8448
	heap := make([]byte, 16384)
	ptx16 := ".entry k16(\n)\n.local .align 8 .b8 buf[16384];"
	ptx32 := ".entry k32(\n)\n.local .align 8 .b8 buf[32768];"
	copy(heap[m16:], ptx16)
	copy(heap[m32:], ptx32)
	copy(heap[name16:], "k16")
	copy(heap[name32:], "k32")
	a, step := r.quotaVM(heap, 100<<20)
	launch := func(h uint32, at uint64) abi.Command {
		return abi.Command{Op: abi.OpLaunch, Handle: h, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, NameOff: at, NameLen: 3}
	}
	step(abi.Command{Op: abi.OpLoadModule, Handle: 1, Format: abi.ModulePTX, HeapOff: m16, Length: uint64(len(ptx16))}, abi.OK)
	step(abi.Command{Op: abi.OpLoadModule, Handle: 2, Format: abi.ModulePTX, HeapOff: m32, Length: uint64(len(ptx32))}, abi.OK)
	mods := fakeFootprint(ptx16) + fakeFootprint(ptx32)
	const resident = fakeSMs * fakeThreadsPerSM
	if u := a.MemoryUsed(); u != mods {
		t.Fatalf("before a launch the VM uses %d, want its modules' %d", u, mods)
	}
	step(launch(1, name16), abi.OK) // 15 KiB more a thread: 60 MiB
	want := mods + (16384-fakeStack)*resident
	if u := a.MemoryUsed(); u != want {
		t.Fatalf("after a 16 KiB kernel the VM uses %d, want %d", u, want)
	}
	launches := len(r.f.launched())
	step(launch(2, name32), abi.ErrNoMemory) // 16 KiB more a thread: 64 MiB, past 100 MiB
	if len(r.f.launched()) != launches {
		t.Error("a launch past the quota reached the driver")
	}
	a.SetMemoryQuota(1) // below the use: what grows nothing still runs
	step(launch(1, name16), abi.OK)
	step(abi.Command{Op: abi.OpAlloc, Handle: 5, Size: 1}, abi.ErrNoMemory)
	a.SetMemoryQuota(0)
	step(launch(2, name32), abi.OK)
	want += (32768 - 16384) * resident
	if u := a.MemoryUsed(); u != want {
		t.Fatalf("after a 32 KiB kernel the VM uses %d, want %d", u, want)
	}
	step(launch(1, name16), abi.OK) // the context keeps the most
	if u := a.MemoryUsed(); u != want {
		t.Fatalf("after a smaller kernel again the VM uses %d, want %d", u, want)
	}
}

// launchHeap lays out a module, a kernel name and an argument blob with
// relocations in a heap.
func launchHeap(ptx string, name string, args []byte, relocs [][2]uint32) ([]byte, abi.Command, abi.Command) {
	heap := make([]byte, 8192)
	copy(heap, ptx)
	copy(heap[4096:], name)
	copy(heap[4200:], args)
	at := 4200 + (len(args)+7)&^7
	for i, r := range relocs {
		le.PutUint32(heap[at+8*i:], r[0])
		le.PutUint32(heap[at+8*i+4:], r[1])
	}
	load := abi.Command{Op: abi.OpLoadModule, Handle: 7, Format: abi.ModulePTX, HeapOff: 0, Length: uint64(len(ptx))}
	launch := abi.Command{Op: abi.OpLaunch, Handle: 7, Grid: [3]uint32{2, 1, 1}, Block: [3]uint32{64, 1, 1},
		NameOff: 4096, NameLen: uint32(len(name)), ArgsOff: 4200, ArgsLen: uint32(len(args)), Relocs: uint32(len(relocs))}
	return heap, load, launch
}

func TestLaunchRelocates(t *testing.T) {
	r := newRig(t, nil)
	args := make([]byte, 20)
	le.PutUint64(args[0:], 3)   // buffer handle 3
	le.PutUint64(args[8:], 512) // heap offset 512
	le.PutUint32(args[16:], 42) // a plain int
	heap, load, launch := launchHeap(".entry scale(\n)", "scale", args,
		[][2]uint32{{0, abi.RelocBuffer}, {8, abi.RelocHeap}})
	vm := r.attach(1, 1, heap)
	r.submit(vm, 0, abi.Command{Op: abi.OpAlloc, Handle: 3, Size: 256}, 0)
	r.submit(vm, 0, load, 1)
	r.submit(vm, 0, launch, 2)
	codes(t, wait(t, r.done, 3), abi.OK, abi.OK, abi.OK)
	var got *fakeLaunch
	launches := r.f.launched()
	for i := range launches {
		if launches[i].name == "scale" {
			got = &launches[i]
		}
	}
	if got == nil {
		t.Fatal("kernel not launched")
	}
	w := r.w(vm)
	if p := devptr(le.Uint64(got.args)); p != w.bufs[3].ptr {
		t.Errorf("buffer argument %#x, want %#x", p, w.bufs[3].ptr)
	}
	if p := devptr(le.Uint64(got.args[8:])); p != w.heapDev+512 {
		t.Errorf("heap argument %#x, want %#x", p, w.heapDev+512)
	}
	if v := le.Uint32(got.args[16:]); v != 42 || len(got.args) != 20 {
		t.Errorf("plain argument %d, %d bytes", v, len(got.args))
	}
	if got.grid != [3]uint32{2, 1, 1} || got.block != [3]uint32{64, 1, 1} {
		t.Errorf("dimensions %v %v", got.grid, got.block)
	}
	// The guest's heap still holds the handle: relocation worked on a copy.
	r.f.mu.Lock()
	handle := le.Uint64(heap[4200:])
	r.f.mu.Unlock()
	if handle != 3 {
		t.Error("relocation wrote into the guest's heap")
	}
}

func TestLaunchRefusals(t *testing.T) {
	args := make([]byte, 16)
	le.PutUint64(args[0:], 3)
	le.PutUint64(args[8:], 1<<20)
	for _, tc := range []struct {
		name   string
		ptx    string
		kernel string
		relocs [][2]uint32
		alloc  bool
		load   abi.ErrorCode
		launch abi.ErrorCode
	}{
		{"bad ptx", "garbage", "k", nil, false, abi.ErrBadRecord, abi.ErrBadHandle},
		{"no such kernel", ".entry k(\n)", "other", nil, false, abi.OK, abi.ErrBadRecord},
		{"reloc past args", ".entry k(\n)", "k", [][2]uint32{{12, abi.RelocBuffer}}, true, abi.OK, abi.ErrBadRecord},
		{"reloc unknown handle", ".entry k(\n)", "k", [][2]uint32{{0, abi.RelocBuffer}}, false, abi.OK, abi.ErrBadHandle},
		{"reloc heap outside", ".entry k(\n)", "k", [][2]uint32{{8, abi.RelocHeap}}, true, abi.OK, abi.ErrHeapRange},
		{"reloc kind", ".entry k(\n)", "k", [][2]uint32{{0, 9}}, true, abi.OK, abi.ErrBadRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			heap, load, launch := launchHeap(tc.ptx, tc.kernel, args, tc.relocs)
			vm := r.attach(1, 1, heap)
			alloc := abi.Command{Op: abi.OpNop}
			if tc.alloc {
				alloc = abi.Command{Op: abi.OpAlloc, Handle: 3, Size: 64}
			}
			r.submit(vm, 0, alloc, 0)
			r.submit(vm, 0, load, 1)
			r.submit(vm, 0, launch, 2)
			codes(t, wait(t, r.done, 3), abi.OK, tc.load, tc.launch)
		})
	}
}

func TestFaultStaysInItsVM(t *testing.T) {
	r := newRig(t, map[string]string{"stall_check": "1ms", "restart_delay": "1h"})
	doneA, doneB := make(chan backend.Completion, 64), make(chan backend.Completion, 64)
	heap, load, launch := launchHeap(".entry fault(\n)", "fault", nil, nil)
	a := r.attachTo(1, 1, heap, doneA)
	b := r.attachTo(2, 1, make([]byte, 4096), doneB)
	r.f.setHold(true)
	r.submit(a, 0, load, 0)
	r.submit(a, 0, launch, 1)
	r.submit(a, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 1000}, 2)
	r.submit(b, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 1000}, 0)
	r.settle(a)
	r.settle(b)
	r.f.setHold(false)
	r.f.release(100) // the fault kernel poisons A; its later work never runs
	codes(t, wait(t, doneA, 3), abi.OK, abi.ErrDevice, abi.ErrDevice)
	codes(t, wait(t, doneB, 1), abi.OK)
	if a.Fault() == nil || b.Fault() != nil {
		t.Fatalf("faults: A %v, B %v", a.Fault(), b.Fault())
	}
	if resultOf(a.Fault()) != cudaErrorIllegalAddress {
		t.Errorf("A's fault %v does not carry CUDA_ERROR_ILLEGAL_ADDRESS", a.Fault())
	}
	// A's later work fails at once while it has no worker; B goes on.
	r.submit(a, 0, abi.Command{Op: abi.OpNop}, 3)
	r.submit(b, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 1000}, 1)
	if c := wait(t, doneA, 1)[0]; c.Code != abi.ErrDevice || c.Tag != 3 {
		t.Fatalf("A after its fault: %+v", c)
	}
	if c := wait(t, doneB, 1)[0]; c.Code != abi.OK {
		t.Fatalf("B after A's fault: %+v", c)
	}
	if ns, _, _ := r.b.GroundTruth(2); ns != 2000 {
		t.Fatalf("B's ground truth %d, want 2000", ns)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("closing the faulted VM: %v", err)
	}
}

func TestFaultedVMGetsAFreshWorker(t *testing.T) {
	r := newRig(t, map[string]string{"stall_check": "1ms", "restart_delay": "10ms"})
	heap, load, launch := launchHeap(".entry fault(\n)", "fault", nil, nil)
	vm := r.attach(1, 1, heap)
	r.submit(vm, 0, load, 0)
	r.submit(vm, 0, launch, 1)
	codes(t, wait(t, r.done, 2), abi.OK, abi.ErrDevice)
	first := r.w(vm)
	// Commands the dead worker issued that never ended: a tracer of the
	// fresh one must not wait for them (tracing.go).
	base := vm.blk.chanBase(0)
	vm.blk.store(base+offIssued, 1000)
	deadline := time.Now().Add(10 * time.Second)
	for vm.Restarts() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no new worker 10s after the fault")
		}
		time.Sleep(time.Millisecond)
	}
	if r.w(vm) == first || vm.Fault() != nil {
		t.Fatalf("after the restart: same worker %v, fault %v", r.w(vm) == first, vm.Fault())
	}
	r.settle(vm)
	if issued, end := vm.blk.load(base+offIssued), vm.blk.load(base+offEnd); issued != end {
		t.Errorf("the fresh worker left offIssued %d past the end marker %d", issued, end)
	}
	// A fresh context: the module of before is gone, new work runs.
	r.submit(vm, 0, launch, 2)
	r.submit(vm, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 700}, 3)
	got := wait(t, r.done, 2)
	if got[0].Code != abi.ErrBadHandle || got[1].Code != abi.OK {
		t.Fatalf("after the restart: %v, %v; want bad handle, ok", got[0].Code, got[1].Code)
	}
	if ns, n, _ := r.b.GroundTruth(1); ns != 700 || n != 1 {
		t.Fatalf("ground truth %d ns over %d kernels, want 700 over 1", ns, n)
	}
}

func TestSubmitBeyondInFlight(t *testing.T) {
	r := newRig(t, nil)
	vm, err := r.b.Attach(backend.VMSpec{ID: 1, Channels: 1, MaxInFlight: 100, Complete: func(backend.Completion) {}})
	if err != nil {
		t.Fatal(err)
	}
	r.f.setHold(true)
	slots := vm.(*cudaVM).blk.l.slots
	if slots < 100 {
		t.Fatalf("%d slots for 100 in flight", slots)
	}
	for i := range slots {
		if err := vm.Submit(0, abi.Command{Op: abi.OpNop}, uint64(i)); err != nil {
			t.Fatalf("command %d of %d: %v", i, slots, err)
		}
	}
	if err := vm.Submit(0, abi.Command{Op: abi.OpNop}, 0); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("one more than %d in flight: %v", slots, err)
	}
	r.f.setHold(false)
	r.f.release(1 << 20)
}

func TestBillingSplitsOverlap(t *testing.T) {
	r := newRig(t, nil)
	doneA, doneB := make(chan backend.Completion, 4), make(chan backend.Completion, 4)
	a := r.attachTo(1, 1, nil, doneA)
	b := r.attachTo(2, 1, nil, doneB)
	r.f.setHold(true)
	r.submit(a, 0, abi.Command{Op: abi.OpFence}, 0)
	r.submit(b, 0, abi.Command{Op: abi.OpFence}, 0)
	r.settle(a)
	r.settle(b)
	r.f.release(1) // both start markers: both run, as time-sliced contexts do
	time.Sleep(50 * time.Millisecond)
	r.f.setHold(false)
	r.f.release(10)
	for name, done := range map[string]chan backend.Completion{"A": doneA, "B": doneB} {
		c := wait(t, done, 1)[0]
		span := c.End - c.Start
		if c.Code != abi.OK || span < 40e6 {
			t.Fatalf("%s: %+v", name, c)
		}
		if d := float64(c.Busy())/float64(span) - 0.5; d < -0.1 || d > 0.1 {
			t.Errorf("%s billed %d ns of a %d ns span it shared with another VM, want about half", name, c.Busy(), span)
		}
	}
}

func TestStatusShowsRunningChannel(t *testing.T) {
	r := newRig(t, nil)
	vm := r.attach(1, 2, make([]byte, 4096))
	r.f.setHold(true)
	// A FENCE: stream markers around no work (the fake's THROTTLE kernel
	// writes its markers at once, as one instant kernel).
	r.submit(vm, 1, abi.Command{Op: abi.OpFence, Value: 1}, 0)
	r.settle(vm)
	var st backend.Status
	r.b.ReadStatus(&st)
	if len(st.Running) != 0 || len(st.Active) != 1 || st.Active[0] != (backend.ChannelRef{VM: 1, Channel: 1}) {
		t.Fatalf("queued, not started: %+v", st)
	}
	r.f.release(1) // the start marker
	before := r.b.now()
	r.b.ReadStatus(&st)
	if len(st.Running) != 1 || st.Running[0].ChannelRef != (backend.ChannelRef{VM: 1, Channel: 1}) || st.Running[0].Engine != vm.engine {
		t.Fatalf("started: %+v", st)
	}
	since := st.Running[0].Since
	if since > before+int64(time.Second) || since > st.Time {
		t.Fatalf("since %d, read at %d", since, st.Time)
	}
	r.b.ReadStatus(&st)
	if st.Running[0].Since != since {
		t.Fatalf("since moved from %d to %d", since, st.Running[0].Since)
	}
	r.f.setHold(false)
	r.f.release(10)
	c := wait(t, r.done, 1)[0]
	if c.Code != abi.OK || c.Start != since || c.End < c.Start {
		t.Fatalf("completion %+v, want start %d", c, since)
	}
	r.b.ReadStatus(&st)
	if len(st.Running) != 0 || len(st.Active) != 0 {
		t.Fatalf("after completion: %+v", st)
	}
}

func TestCloseFlushesAndRefuses(t *testing.T) {
	r := newRig(t, nil)
	vm := r.attach(1, 1, make([]byte, 4096))
	r.f.setHold(true)
	for i := range 3 {
		r.submit(vm, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 1000}, uint64(i))
	}
	r.settle(vm)
	if err := vm.Close(); err != nil {
		t.Fatal(err)
	}
	codes(t, wait(t, r.done, 3), abi.ErrShutdown, abi.ErrShutdown, abi.ErrShutdown)
	if err := vm.Submit(0, abi.Command{Op: abi.OpNop}, 9); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("submit after close: %v", err)
	}
	if err := vm.Close(); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	if err := vm.Submit(5, abi.Command{Op: abi.OpNop}, 9); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("bad channel: %v", err)
	}
}

func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want abi.ErrorCode
	}{
		{nil, abi.OK},
		{cudaErrorOutOfMemory, abi.ErrNoMemory},
		{cudaErrorInvalidPTX, abi.ErrBadRecord},
		{cudaErrorNotFound, abi.ErrBadRecord},
		{cudaErrorIllegalAddress, abi.ErrDevice},
		{errors.New("other"), abi.ErrDevice},
	} {
		if got := codeOf(tc.err); got != tc.want {
			t.Errorf("codeOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if !sticky(cudaErrorIllegalAddress) || sticky(cudaErrorOutOfMemory) || sticky(cudaErrorLaunchOutOfRes) {
		t.Error("sticky misclassifies")
	}
}

func TestAttachFailureDestroysContext(t *testing.T) {
	r := newRig(t, nil)
	r.f.setErr(&r.f.streamErr, cudaErrorOutOfMemory)
	if _, err := r.b.Attach(backend.VMSpec{ID: 1, Channels: 2, Complete: func(backend.Completion) {}}); err == nil {
		t.Fatal("attach succeeded without streams")
	}
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	for c, fc := range r.f.ctxs {
		if !fc.destroyed {
			t.Errorf("context %#x left behind by a failed attach", c)
		}
	}
	if len(r.f.ctxs) != 1 {
		t.Errorf("%d contexts made, want 1", len(r.f.ctxs))
	}
}

func TestCodeFromTheSlot(t *testing.T) {
	r := newRig(t, nil)
	vm := r.attach(1, 1, nil)
	ch := vm.chans[0]
	off := vm.blk.l.codeOff(ch.idx, 5)
	for _, tc := range []struct {
		stamp, code uint64
		want        abi.ErrorCode
	}{
		{5, uint64(abi.ErrBadHandle), abi.ErrBadHandle},
		{5, uint64(abi.OK), abi.OK},
		{4, uint64(abi.OK), abi.ErrDevice}, // another command's
		{5, 1 << 40, abi.ErrDevice},        // no worker wrote that
		{5, uint64(abi.ErrShutdown) + 1, abi.ErrDevice},
	} {
		vm.blk.store(off+codeValue, tc.code)
		vm.blk.store(off+codeStamp, tc.stamp)
		if got := ch.codeOf(5); got != tc.want {
			t.Errorf("slot (stamp %d, code %d): %v, want %v", tc.stamp, tc.code, got, tc.want)
		}
	}
}

// TestWorkerProcessReportsItsStart starts a real worker process (this test
// binary, started again) with a driver that is not there: the handshake,
// the descriptors and the heap's mapping work, and the worker's failure
// comes back as Attach's error.
func TestWorkerProcessReportsItsStart(t *testing.T) {
	b, err := open(newFake(), backend.Options{Params: map[string]string{"library": "/nonexistent/libcuda.so.1"}}, spawnProcess)
	if err != nil {
		t.Fatal(err)
	}
	b.needFiles = true
	defer b.Close()
	fd, err := shm.NewMemfd("heap", 3*4096)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	heap, err := shm.Map(fd, 3*4096)
	if err != nil {
		t.Fatal(err)
	}
	defer shm.Unmap(heap)
	spec := backend.VMSpec{ID: 1, Name: "w", Channels: 2, Heap: heap[4096:], Complete: func(backend.Completion) {}}
	if _, err := b.Attach(spec); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("a heap without its file: %v", err)
	}
	spec.HeapFile = &backend.FileRange{FD: fd, Offset: 4096}
	_, err = b.Attach(spec)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") {
		t.Fatalf("attach with a worker that cannot load its driver: %v", err)
	}
	t.Logf("as expected: %v", err)
	if _, _, ok := b.GroundTruth(1); ok {
		t.Fatal("the VM stayed attached after its worker failed to start")
	}
}

func TestAttachDuringClose(t *testing.T) {
	f := newFake()
	p := &inProcess{d: f}
	gate := make(chan struct{})
	b, err := open(f, backend.Options{}, func(cfg workerConfig, files workerFiles) (proc, error) {
		<-gate // the worker starts once Close has run
		return p.spawn(cfg, files)
	})
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := b.Attach(backend.VMSpec{ID: 1, Channels: 1, Complete: func(backend.Completion) {}})
		res <- err
	}()
	time.Sleep(10 * time.Millisecond) // Attach is waiting for its worker
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	close(gate)
	select {
	case err := <-res:
		if !errors.Is(err, backend.ErrClosed) {
			t.Fatalf("attach racing close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("attach racing close hangs")
	}
	if w := p.worker(1); w == nil {
		t.Fatal("no worker was started")
	}
}
