package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"golang.org/x/sys/unix"
)

// attachSys attaches a VM with a heap and, when sys is not nil, a syscall
// area.
func (r *rig) attachSys(id uint32, heap, sys []byte) *cudaVM {
	r.t.Helper()
	vm, err := r.b.Attach(backend.VMSpec{ID: id, Name: "vm", Channels: 1, Heap: heap, Syscalls: sys,
		Complete: func(c backend.Completion) { r.done <- c }})
	if err != nil {
		r.t.Fatal(err)
	}
	return vm.(*cudaVM)
}

func TestLaunchRelocatesSyscallArea(t *testing.T) {
	r := newRig(t, nil)
	args := make([]byte, 16)
	le.PutUint64(args[8:], 64) // heap offset 64
	heap, load, launch := launchHeap(".entry sluice_sys_null(\n)", "sluice_sys_null", args,
		[][2]uint32{{0, abi.RelocSyscall}, {8, abi.RelocHeap}})
	sys := make([]byte, 2*4096)
	vm := r.attachSys(1, heap, sys)
	w := r.w(vm)
	if w.sysDev == 0 {
		t.Fatal("the syscall area was not registered with the GPU")
	}
	if r.f.mem(w.sysDev, uint64(len(sys))) == nil {
		t.Fatal("the syscall area's device range is not registered memory")
	}
	r.submit(vm, 0, load, 0)
	r.submit(vm, 0, launch, 1)
	codes(t, wait(t, r.done, 2), abi.OK, abi.OK)
	var got *fakeLaunch
	for _, l := range r.f.launched() {
		if l.name == "sluice_sys_null" {
			got = &l
		}
	}
	if got == nil {
		t.Fatal("kernel not launched")
	}
	if p := devptr(le.Uint64(got.args)); p != w.sysDev {
		t.Errorf("syscall argument %#x, want the area's device address %#x", p, w.sysDev)
	}
	if p := devptr(le.Uint64(got.args[8:])); p != w.heapDev+64 {
		t.Errorf("heap argument %#x, want %#x", p, w.heapDev+64)
	}
	// What the kernel writes through its pointer lands in the VM's area.
	copy(r.f.mem(w.sysDev+abi.SyscallSlotsOff, 4), []byte{2, 0, 0, 0})
	if sys[abi.SyscallSlotsOff] != 2 {
		t.Error("the device address does not reach the VM's syscall area")
	}
}

func TestSyscallRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		area  bool
		value uint64
		want  abi.ErrorCode
	}{
		{"no area", false, 0, abi.ErrUnsupported},
		{"non-zero value", true, 8, abi.ErrBadRecord},
		{"zero value", true, 0, abi.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			args := make([]byte, 8)
			le.PutUint64(args, tc.value)
			heap, load, launch := launchHeap(".entry k(\n)", "k", args, [][2]uint32{{0, abi.RelocSyscall}})
			var sys []byte
			if tc.area {
				sys = make([]byte, 2*4096)
			}
			vm := r.attachSys(1, heap, sys)
			r.submit(vm, 0, load, 0)
			r.submit(vm, 0, launch, 1)
			codes(t, wait(t, r.done, 2), abi.OK, tc.want)
		})
	}
}

func TestLoadSimModuleUnsupported(t *testing.T) {
	r := newRig(t, nil)
	heap := make([]byte, 4096)
	copy(heap, abi.SimModuleImage)
	vm := r.attachSys(1, heap, make([]byte, 2*4096))
	r.submit(vm, 0, abi.Command{Op: abi.OpLoadModule, Handle: 3, Format: abi.ModuleSim, Length: uint64(len(abi.SimModuleImage))}, 0)
	codes(t, wait(t, r.done, 1), abi.ErrUnsupported)
	r.f.mu.Lock()
	n := len(r.f.mods)
	r.f.mu.Unlock()
	if n != 2 {
		t.Errorf("%d modules loaded, want the throttle kernel's and the tracer's alone", n)
	}
}

// TestAttachNeedsTheSyscallFile: a worker process maps the area from its
// file, at a page.
func TestAttachNeedsTheSyscallFile(t *testing.T) {
	r := newRig(t, nil)
	r.b.needFiles = true
	spec := backend.VMSpec{ID: 1, Channels: 1, Syscalls: make([]byte, 8192), Complete: func(backend.Completion) {}}
	if _, err := r.b.Attach(spec); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("a syscall area without its file: %v", err)
	}
	spec.SyscallFile = &backend.FileRange{FD: 0, Offset: 100}
	if _, err := r.b.Attach(spec); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("a syscall area off a page: %v", err)
	}
}

// TestWorkerProcessMapsTheSyscallArea starts real worker processes with a
// driver that is not there: with and without a heap (descriptor 6 closed),
// the worker maps the syscall area from descriptor 7 and fails only at the
// driver.
func TestWorkerProcessMapsTheSyscallArea(t *testing.T) {
	b, err := open(newFake(), backend.Options{Params: map[string]string{"library": "/nonexistent/libcuda.so.1"}}, spawnProcess)
	if err != nil {
		t.Fatal(err)
	}
	b.needFiles = true
	defer b.Close()
	const size = 4 * 4096
	fd, err := shm.NewMemfd("region", size)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	mem, err := shm.Map(fd, size)
	if err != nil {
		t.Fatal(err)
	}
	defer shm.Unmap(mem)
	for _, withHeap := range []bool{false, true} {
		spec := backend.VMSpec{ID: 1, Name: "w", Channels: 1, Syscalls: mem[4096 : 3*4096],
			SyscallFile: &backend.FileRange{FD: fd, Offset: 4096}, Complete: func(backend.Completion) {}}
		if withHeap {
			spec.Heap, spec.HeapFile = mem[3*4096:], &backend.FileRange{FD: fd, Offset: 3 * 4096}
		}
		_, err = b.Attach(spec)
		if err == nil || !strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") || strings.Contains(err.Error(), "mapping") {
			t.Fatalf("heap %v: attach with a worker that cannot load its driver: %v", withHeap, err)
		}
	}
}

// TestRingCounterRelocatedFromTheHead: a LAUNCH relocation of kind
// RelocSyscallRing becomes the VM's claim counter in device memory, which
// the worker set to the mediator's request ring head when it started.
func TestRingCounterRelocatedFromTheHead(t *testing.T) {
	r := newRig(t, nil)
	args := make([]byte, 16)
	heap, load, launch := launchHeap(".entry sluice_sys_null(\n)", "sluice_sys_null", args,
		[][2]uint32{{0, abi.RelocSyscall}, {8, abi.RelocSyscallRing}})
	sys := make([]byte, 2*4096)
	v, err := r.b.Attach(backend.VMSpec{ID: 1, Name: "vm", Channels: 1, Heap: heap, Syscalls: sys,
		RingHead: func() uint64 { return 42 }, Complete: func(c backend.Completion) { r.done <- c }})
	if err != nil {
		t.Fatal(err)
	}
	vm := v.(*cudaVM)
	w := r.w(vm)
	if w.ringDev == 0 {
		t.Fatal("no claim counter for a VM with a syscall area")
	}
	if b := r.f.mem(w.ringDev, 8); b == nil || le.Uint64(b) != 42 {
		t.Fatalf("claim counter %v, want 42 (the head)", b)
	}
	r.submit(vm, 0, load, 0)
	r.submit(vm, 0, launch, 1)
	codes(t, wait(t, r.done, 2), abi.OK, abi.OK)
	for _, l := range r.f.launched() {
		if l.name == "sluice_sys_null" {
			if p := devptr(le.Uint64(l.args[8:])); p != w.ringDev {
				t.Errorf("ring argument %#x, want the counter's device address %#x", p, w.ringDev)
			}
			return
		}
	}
	t.Fatal("kernel not launched")
}
