package cuda

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"golang.org/x/sys/unix"
)

// These tests drive a real GPU. Without one (no libcuda.so.1, or no device)
// they skip and say why; SLUICE_REQUIRE_GPU=1 (set by make bench-gpu's
// checks) turns that into a failure.

func gpuBackend(t *testing.T, params map[string]string) *Backend {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("SLUICE_REQUIRE_GPU") == "1" {
		skip = t.Fatalf
	}
	if params == nil {
		params = map[string]string{}
	}
	if lib := os.Getenv("SLUICE_LIBCUDA"); lib != "" {
		params["library"] = lib
	}
	if _, err := loadLibcuda(params["library"]); err != nil {
		skip("no CUDA driver on this machine: %v (runs on a machine with an NVIDIA GPU and its driver: make bench-gpu)", err)
	}
	be, err := Open(backend.Options{Params: params})
	if err != nil {
		skip("no usable GPU: %v (runs on a machine with an NVIDIA GPU and its driver: make bench-gpu)", err)
	}
	b := be.(*Backend)
	b.KeepGroundTruth()
	t.Cleanup(func() { _ = b.Close() })
	t.Logf("GPU: %s, %d bytes, PCI %s", b.DeviceName(), b.DeviceMemory(), b.PCIBusID())
	if b.DeviceMemory() <= 0 || b.PCIBusID() == "" {
		t.Fatalf("the driver told no memory (%d) or PCI address (%q)", b.DeviceMemory(), b.PCIBusID())
	}
	return b
}

// gpuHeap is a VM's heap as the mediator makes it: a memfd mapping, which
// the VM's GPU worker maps too.
type gpuHeap struct {
	mem []byte
	fd  int
}

func mapHeap(t *testing.T, size int) gpuHeap {
	t.Helper()
	fd, err := shm.NewMemfd("gpu-test-heap", int64(size))
	if err != nil {
		t.Fatal(err)
	}
	m, err := shm.Map(fd, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shm.Unmap(m); _ = unix.Close(fd) })
	return gpuHeap{mem: m, fd: fd}
}

func attachGPU(t *testing.T, b *Backend, id uint32, heap gpuHeap) (*cudaVM, chan backend.Completion) {
	t.Helper()
	done := make(chan backend.Completion, 8192)
	vm, err := b.Attach(backend.VMSpec{ID: id, Name: "gpu-test", Channels: 2, Heap: heap.mem, MaxInFlight: 8192,
		HeapFile: &backend.FileRange{FD: heap.fd}, Complete: func(c backend.Completion) { done <- c }})
	if err != nil {
		t.Fatal(err)
	}
	return vm.(*cudaVM), done
}

func TestGPUThrottleAgainstGlobaltimer(t *testing.T) {
	b := gpuBackend(t, nil)
	vm, done := attachGPU(t, b, 1, mapHeap(t, 1<<20))
	const n, ns = 50, 1_000_000
	for i := range n {
		if err := vm.Submit(0, abi.Command{Op: abi.OpThrottle, DurationNs: ns}, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	var busy int64
	for i, c := range wait(t, done, n) {
		if c.Code != abi.OK || c.Tag != uint64(i) {
			t.Fatalf("completion %d: %+v", i, c)
		}
		busy += c.Busy()
	}
	truth, kernels, _ := b.GroundTruth(1)
	t.Logf("%d kernels of %d ns: ground truth %d ns, completions %d ns (%+.3f%%)",
		kernels, ns, truth, busy, 100*(float64(busy)/float64(truth)-1))
	if kernels != n || truth < n*ns || truth > n*ns*101/100 {
		t.Fatalf("ground truth %d ns over %d kernels, want %d ns within 1%%", truth, kernels, n*ns)
	}
	if d := float64(busy)/float64(truth) - 1; d < -0.02 || d > 0.02 {
		t.Fatalf("completions' busy time %d ns is %.2f%% off the ground truth %d ns", busy, 100*d, truth)
	}
}

// addOnePTX is out[i] = in[i] + 1 for i < n: in a device buffer, out in the
// guest's heap (through its relocated device address).
const addOnePTX = `
.version 7.0
.target sm_70
.address_size 64
.visible .entry add_one(.param .u64 p_in, .param .u64 p_out, .param .u32 p_n)
{
	.reg .pred %p1;
	.reg .b32 %r<7>;
	.reg .b64 %rd<6>;
	ld.param.u64 %rd1, [p_in];
	ld.param.u64 %rd2, [p_out];
	ld.param.u32 %r1, [p_n];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra END;
	mul.wide.u32 %rd3, %r5, 4;
	add.s64 %rd4, %rd1, %rd3;
	ld.global.u32 %r6, [%rd4];
	add.u32 %r6, %r6, 1;
	add.s64 %rd5, %rd2, %rd3;
	st.global.u32 [%rd5], %r6;
END:
	ret;
}
.visible .entry poke()
{
	.reg .b32 %r1;
	.reg .b64 %rd1;
	mov.u64 %rd1, 16;
	mov.u32 %r1, 1;
	st.global.u32 [%rd1], %r1;
	ret;
}
`

// Heap layout of the launch tests.
const (
	hModule = 0
	hName   = 16384
	hArgs   = 16640
	hIn     = 32768
	hOut    = 65536
	nElems  = 1000
)

func launchCmds(heap []byte, kernel string, relocs bool) (load, launch abi.Command) {
	copy(heap[hModule:], addOnePTX)
	copy(heap[hName:], kernel)
	le.PutUint64(heap[hArgs:], 5)      // buffer handle 5
	le.PutUint64(heap[hArgs+8:], hOut) // heap offset
	le.PutUint32(heap[hArgs+16:], nElems)
	nrel := uint32(0)
	if relocs {
		le.PutUint32(heap[hArgs+24:], 0)
		le.PutUint32(heap[hArgs+28:], abi.RelocBuffer)
		le.PutUint32(heap[hArgs+32:], 8)
		le.PutUint32(heap[hArgs+36:], abi.RelocHeap)
		nrel = 2
	}
	load = abi.Command{Op: abi.OpLoadModule, Handle: 1, Format: abi.ModulePTX, HeapOff: hModule, Length: uint64(len(addOnePTX))}
	args := uint32(20)
	if kernel == "poke" {
		args, nrel = 0, 0
	}
	launch = abi.Command{Op: abi.OpLaunch, Handle: 1, Grid: [3]uint32{(nElems + 127) / 128, 1, 1}, Block: [3]uint32{128, 1, 1},
		NameOff: hName, NameLen: uint32(len(kernel)), ArgsOff: hArgs, ArgsLen: args, Relocs: nrel}
	return load, launch
}

func TestGPULaunchWithRelocations(t *testing.T) {
	b := gpuBackend(t, nil)
	h := mapHeap(t, 1<<20)
	heap := h.mem
	vm, done := attachGPU(t, b, 1, h)
	for i := range nElems {
		le.PutUint32(heap[hIn+4*i:], uint32(i*3))
	}
	load, launch := launchCmds(heap, "add_one", true)
	cmds := []abi.Command{
		{Op: abi.OpAlloc, Handle: 5, Size: 4 * nElems},
		{Op: abi.OpMemset, Handle: 5, Length: 4 * nElems, Value: 0xff},
		{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyHostToDevice, HeapOff: hIn, Length: 4 * nElems},
		load, launch,
		{Op: abi.OpFence, Value: 1},
	}
	for i, c := range cmds {
		if err := vm.Submit(0, c, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range wait(t, done, len(cmds)) {
		if c.Code != abi.OK {
			t.Fatalf("command %d (%v): %v", i, c.Op, c.Code)
		}
	}
	for i := range nElems {
		if got := le.Uint32(heap[hOut+4*i:]); got != uint32(i*3+1) {
			t.Fatalf("out[%d] = %d, want %d", i, got, i*3+1)
		}
	}
	// And back through a device-to-host copy.
	if err := vm.Submit(1, abi.Command{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyDeviceToHost, HeapOff: hIn + 8192, Length: 4 * nElems}, 0); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, done, 1)[0]; c.Code != abi.OK {
		t.Fatalf("copy back: %v", c.Code)
	}
	if got := le.Uint32(heap[hIn+8192+4*7:]); got != 21 {
		t.Fatalf("copied back %d, want 21", got)
	}
}

// TestGPUFaultStaysInItsVM faults a kernel of one VM while another VM's
// kernels run. An illegal address poisons every context of its process
// (the CUDA documentation: "the process must be terminated and
// relaunched"); each VM's context lives in its own worker process, so the
// other VM must not notice, and the faulting VM gets a fresh worker.
func TestGPUFaultStaysInItsVM(t *testing.T) {
	b := gpuBackend(t, map[string]string{"restart_delay": "100ms"})
	heapA := mapHeap(t, 1<<20)
	a, doneA := attachGPU(t, b, 1, heapA)
	other, doneB := attachGPU(t, b, 2, mapHeap(t, 1<<20))
	load, poke := launchCmds(heapA.mem, "poke", false)
	for i := range 20 {
		if err := other.Submit(0, abi.Command{Op: abi.OpThrottle, DurationNs: 500_000}, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range []abi.Command{load, poke, {Op: abi.OpThrottle, DurationNs: 1000}} {
		if err := a.Submit(0, c, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	gotA := wait(t, doneA, 3)
	if gotA[0].Code != abi.OK || gotA[1].Code != abi.ErrDevice || gotA[2].Code != abi.ErrDevice {
		t.Fatalf("the faulting VM saw %v, %v, %v; want ok, device error, device error", gotA[0].Code, gotA[1].Code, gotA[2].Code)
	}
	t.Logf("the faulting VM's worker: %v", a.Fault())
	for i, c := range wait(t, doneB, 20) {
		if c.Code != abi.OK {
			t.Errorf("the other VM's command %d, queued before the fault: %v", i, c.Code)
		}
	}
	if err := other.Submit(1, abi.Command{Op: abi.OpThrottle, DurationNs: 100_000}, 99); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, doneB, 1)[0]; c.Code != abi.OK || other.Fault() != nil {
		t.Fatalf("the other VM after the fault: %v (worker: %v)", c.Code, other.Fault())
	}
	deadline := time.Now().Add(30 * time.Second)
	for a.Restarts() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the faulting VM has no new worker 30s after its fault")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.Submit(1, abi.Command{Op: abi.OpThrottle, DurationNs: 100_000}, 3); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, doneA, 1)[0]; c.Code != abi.OK {
		t.Fatalf("the faulting VM in its fresh worker: %v", c.Code)
	}
}

// TestGPUBillingOfConcurrentVMs runs two VMs' kernels at once (the GPU
// time-slices their contexts) and compares what each is billed (its
// completions' Busy) with what its kernels measured on %globaltimer.
// Completion spans overlap (each VM's add up to nearly the whole run);
// each VM's tracer says when its context held the GPU (tracing.go), so the
// bills add up to the wall time at most, and each is within 2% of the
// VM's kernels' own time (the context switches are nobody's).
func TestGPUBillingOfConcurrentVMs(t *testing.T) {
	b := gpuBackend(t, nil)
	vms := []uint32{1, 2}
	lens := []uint64{100_000, 1_000_000} // 10× skew
	dones := make([]chan backend.Completion, 2)
	handles := make([]*cudaVM, 2)
	for i, id := range vms {
		handles[i], dones[i] = attachGPU(t, b, id, mapHeap(t, 1<<20))
	}
	const total = 400_000_000 // each VM's kernel time
	start := time.Now()
	for i, v := range handles {
		for j := range total / lens[i] {
			if err := v.Submit(0, abi.Command{Op: abi.OpThrottle, DurationNs: lens[i]}, j); err != nil {
				t.Fatal(err)
			}
		}
	}
	var bills int64
	for i := range handles {
		var billed, span int64
		for _, c := range wait(t, dones[i], int(total/lens[i])) {
			if c.Code != abi.OK {
				t.Fatalf("VM %d: %v", vms[i], c.Code)
			}
			billed += c.Busy()
			span += c.End - c.Start
		}
		bills += billed
		truth, _, _ := b.GroundTruth(vms[i])
		d := float64(billed)/float64(truth) - 1
		kinds, count, outs := b.BillKinds(vms[i])
		t.Logf("MEASURED: VM %d (%d µs kernels): billed %d ns, spans %d ns, %%globaltimer %d ns: billed %+.2f%%; alone %.0f traced %.0f even %.0f ns; its tracer counted %d ns, saw %d switches out",
			vms[i], lens[i]/1000, billed, span, truth, 100*d, kinds[billAlone], kinds[billTraced], kinds[billEven], count, outs)
		if kinds[billTraced] == 0 {
			t.Errorf("VM %d: nothing of its bill made by its tracer", vms[i])
		}
		if d < -0.02 || d > 0.02 {
			t.Errorf("VM %d billed %.2f%% off its kernels' own time, want within 2%%", vms[i], 100*d)
		}
	}
	wall := time.Since(start)
	sw, f := b.SwitchOverhead()
	t.Logf("MEASURED: bills %d ns in all, wall %d ns, traced %d ns, switch overhead %d ns (f %.4f)",
		bills, wall.Nanoseconds(), b.TracedNs(), sw, f)
	if b.TracedNs() == 0 {
		t.Error("no interval was billed by the tracers: the VMs' contexts ran at once, unseen")
	}
	if bills > wall.Nanoseconds() {
		t.Errorf("billed %v in all in %v: overlapping spans billed twice", time.Duration(bills), wall)
	}
}

func TestGPUStatusWhileRunning(t *testing.T) {
	b := gpuBackend(t, nil)
	vm, done := attachGPU(t, b, 1, mapHeap(t, 1<<20))
	if err := vm.Submit(1, abi.Command{Op: abi.OpThrottle, DurationNs: 50_000_000}, 0); err != nil {
		t.Fatal(err)
	}
	var st backend.Status
	deadline := time.Now().Add(time.Second)
	for len(st.Running) == 0 && time.Now().Before(deadline) {
		b.ReadStatus(&st)
	}
	if len(st.Running) != 1 || st.Running[0].ChannelRef != (backend.ChannelRef{VM: 1, Channel: 1}) {
		t.Fatalf("status while a 50 ms kernel runs: %+v", st)
	}
	c := wait(t, done, 1)[0]
	if c.Start != st.Running[0].Since || c.Busy() < 49_000_000 || c.Busy() > 52_000_000 {
		t.Fatalf("completion %+v (busy %d ns), status since %d", c, c.Busy(), st.Running[0].Since)
	}
}

// TestGPUWatchdog: a 3 s THROTTLE kernel runs until its VM's limit is
// lowered below what it has run; the watchdog kills the VM's worker (the
// kernel ends with its context), the kernel and the command queued behind
// it fail with ErrTimedOut long before the 3 s, another VM's kernels
// complete, and the VM runs kernels again in a fresh worker.
func TestGPUWatchdog(t *testing.T) {
	b := gpuBackend(t, map[string]string{"restart_delay": "100ms"})
	a, doneA := attachGPU(t, b, 1, mapHeap(t, 1<<20))
	other, doneB := attachGPU(t, b, 2, mapHeap(t, 1<<20))
	start := time.Now()
	for i, c := range []abi.Command{{Op: abi.OpThrottle, DurationNs: 3e9}, {Op: abi.OpNop}} {
		if err := a.Submit(0, c, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		if err := other.Submit(0, abi.Command{Op: abi.OpThrottle, DurationNs: 1_000_000}, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	ch := a.chans[0]
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		ch.mu.Lock()
		ran := 0.0
		if len(ch.q) > 0 {
			ran = ch.q[0].ran
		}
		ch.mu.Unlock()
		if ran > 200e6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 3 s kernel has run %v after 10 s", time.Duration(ran))
		}
	}
	a.SetMaxCommand(100e6) // 100 ms: past its deadline at once
	got := wait(t, doneA, 2)
	took := time.Since(start)
	for i, c := range got {
		if c.Code != abi.ErrTimedOut {
			t.Errorf("A's command %d: %v, want %v", i, c.Code, abi.ErrTimedOut)
		}
	}
	if took > 2*time.Second {
		t.Errorf("A's commands ended %v after submission: the 3 s kernel was not stopped", took)
	}
	t.Logf("A's commands ended %v after submission; its worker: %v", took, a.Fault())
	if n := a.Timeouts(); n != 1 {
		t.Errorf("A's timeouts %d, want 1", n)
	}
	for i, c := range wait(t, doneB, 200) {
		if c.Code != abi.OK {
			t.Errorf("B's command %d: %v", i, c.Code)
		}
	}
	if n := other.Timeouts(); n != 0 || other.Fault() != nil {
		t.Errorf("B: %d timeouts, worker %v", n, other.Fault())
	}
	for deadline := time.Now().Add(30 * time.Second); a.Restarts() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("A has no fresh worker 30 s after the kill")
		}
	}
	if err := a.Submit(1, abi.Command{Op: abi.OpThrottle, DurationNs: 50e6}, 2); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, doneA, 1)[0]; c.Code != abi.OK {
		t.Fatalf("A's 50 ms kernel in its fresh worker: %v", c.Code)
	}
}

// TestGPUKeepAdopt hands a VM's GPU worker over from one Backend to
// another in this process, as sluiced's successor (the same process after
// exec) adopts it: a buffer filled and a module loaded before the keep are
// there after it, byte for byte, in the same worker process; a kernel of
// the kept module runs on the kept buffer. Another VM of the first Backend
// closes with it as usual.
func TestGPUKeepAdopt(t *testing.T) {
	b1 := gpuBackend(t, nil)
	h := mapHeap(t, 16<<20)
	heap := h.mem
	spec := backend.VMSpec{ID: 1, Name: "gpu-keep", Channels: 2, Heap: heap, MaxInFlight: 8192, HeapFile: &backend.FileRange{FD: h.fd}}
	done := make(chan backend.Completion, 64)
	spec.Complete = func(c backend.Completion) { done <- c }
	be, err := b1.Attach(spec)
	if err != nil {
		t.Fatal(err)
	}
	vm := be.(*cudaVM)
	other, doneOther := attachGPU(t, b1, 2, mapHeap(t, 1<<20))
	const bigOff, backOff, bigLen = 1 << 20, 8 << 20, 4 << 20
	for i := range nElems {
		le.PutUint32(heap[hIn+4*i:], uint32(i*5))
	}
	for i := range bigLen / 8 {
		le.PutUint64(heap[bigOff+8*i:], uint64(i)*0x9e3779b97f4a7c15)
	}
	load, launch := launchCmds(heap, "add_one", true)
	before := []abi.Command{
		{Op: abi.OpAlloc, Handle: 5, Size: 4 * nElems},
		{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyHostToDevice, HeapOff: hIn, Length: 4 * nElems},
		{Op: abi.OpAlloc, Handle: 6, Size: bigLen},
		{Op: abi.OpCopy, Handle: 6, Dir: abi.CopyHostToDevice, HeapOff: bigOff, Length: bigLen},
		load,
	}
	for i, c := range before {
		if err := vm.Submit(0, c, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range wait(t, done, len(before)) {
		if c.Code != abi.OK {
			t.Fatalf("before the keep, command %d (%v): %v", i, c.Op, c.Code)
		}
	}
	if err := other.Submit(0, abi.Command{Op: abi.OpThrottle, DurationNs: 1_000_000}, 0); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, doneOther, 1)[0]; c.Code != abi.OK {
		t.Fatalf("the other VM: %v", c.Code)
	}
	used := vm.MemoryUsed()
	start := time.Now()
	k, err := vm.Keep()
	if err != nil {
		t.Fatal(err)
	}
	kept := time.Since(start)
	defer closeFDs(k.FDs)
	pid, err := pidOf(k.FDs[keptPidfd])
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Close(); err != nil { // the predecessor is done with; the other VM closes with it
		t.Fatal(err)
	}
	if !alive(pid) {
		t.Fatalf("the kept worker %d did not outlive its backend", pid)
	}
	// Nothing of the mediator's side is left to hold the buffers: they
	// come back from the worker's context.
	for i := range 4 * nElems {
		heap[hOut+i] = 0
	}
	b2 := gpuBackend(t, nil)
	done = make(chan backend.Completion, 64)
	spec.Complete = func(c backend.Completion) { done <- c }
	spec.Adopt = &k
	start = time.Now()
	be, err = b2.Attach(spec)
	if err != nil {
		t.Fatal(err)
	}
	adopted := time.Since(start)
	vm = be.(*cudaVM)
	t.Logf("worker %d kept in %v, adopted in %v; %d bytes of device memory held", pid, kept, adopted, used)
	if u := vm.MemoryUsed(); u != used || u < bigLen {
		t.Errorf("the adopted VM holds %d bytes, %d before", u, used)
	}
	after := []abi.Command{
		{Op: abi.OpCopy, Handle: 6, Dir: abi.CopyDeviceToHost, HeapOff: backOff, Length: bigLen},
		launch,
		{Op: abi.OpFence, Value: 1},
	}
	for i, c := range after {
		if err := vm.Submit(i%2, c, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range wait(t, done, len(after)) {
		if c.Code != abi.OK {
			t.Fatalf("after the adoption, command %v (%v): %v", c.Tag, c.Op, c.Code)
		}
	}
	if !bytes.Equal(heap[backOff:backOff+bigLen], heap[bigOff:bigOff+bigLen]) {
		t.Fatal("the 4 MiB buffer read back after the hand-over differs from what was written before it")
	}
	for i := range nElems {
		if got := le.Uint32(heap[hOut+4*i:]); got != uint32(i*5+1) {
			t.Fatalf("out[%d] = %d, want %d: the kept kernel did not run on the kept buffer", i, got, i*5+1)
		}
	}
	if vm.Restarts() != 0 || vm.Fault() != nil || !alive(pid) {
		t.Fatalf("restarts %d, fault %v, worker %d alive %v", vm.Restarts(), vm.Fault(), pid, alive(pid))
	}
	if err := vm.Close(); err != nil {
		t.Fatal(err)
	}
	reaped(t, pid)
}

// TestGPUCrashAdopt kills a mediator (a process of this test binary)
// with SIGKILL while its VM's GPU worker holds a buffer and a module, has
// a 50 ms THROTTLE and an ALLOC in flight, an ALLOC stamped in its ring
// but not its tail, and one half written: the worker, its descriptors in
// a stand-in fd store, outlives the crash, and a second backend adopts it
// from the store. The buffer reads back exactly, the module's kernel runs
// on it, the ALLOCs in flight and stamped ran once (their handles are
// taken) and the half-written one never (its handle is free).
func TestGPUCrashAdopt(t *testing.T) {
	adoptCrashed(t, gpuBackend(t, nil), "gpu")
}

// TestGPUSwitchOverhead: on a real GPU the calibration's two probe
// contexts run at once, and the part of their span that neither ran (the
// switches between them) is a sane fraction; Open (switch_overhead auto
// by default) measured one too.
func TestGPUSwitchOverhead(t *testing.T) {
	b := gpuBackend(t, nil)
	_, opened := b.SwitchOverhead()
	t.Logf("measured at Open: f %.4f", opened)
	for i := range 3 {
		start := time.Now()
		f, err := b.measureSwitchOverhead(probeNs, probeWait)
		if err != nil {
			t.Fatalf("calibration %d: %v", i, err)
		}
		t.Logf("calibration %d: f %.4f in %v", i, f, time.Since(start))
		if f < 0 || f >= maxSwitchOverhead {
			t.Errorf("calibration %d: f %g, want in [0, %g)", i, f, maxSwitchOverhead)
		}
		if f > 0 && opened == 0 {
			// Open's own calibration runs before KeepGroundTruth can be
			// called: its probes must keep their records regardless.
			t.Errorf("calibration %d measured f %g where Open's measured nothing", i, f)
		}
	}
	if opened < 0 || opened >= maxSwitchOverhead {
		t.Errorf("f %g at Open, want in [0, %g)", opened, maxSwitchOverhead)
	}
}

// stepper returns a step that submits a command on vm's channel 0 and
// checks its code.
func stepper(t *testing.T, vm *cudaVM, done chan backend.Completion) func(abi.Command, abi.ErrorCode) {
	var tag uint64
	return func(c abi.Command, want abi.ErrorCode) {
		t.Helper()
		if err := vm.Submit(0, c, tag); err != nil {
			t.Fatal(err)
		}
		tag++
		if got := wait(t, done, 1)[0]; got.Code != want {
			t.Fatalf("%v: %v, want %v", c.Op, got.Code, want)
		}
	}
}

// oneThread lays out module ptx (handle 1) and a one-thread launch of
// kernel whose parameters are buffer 5's address (relocated) and then more,
// and returns the LOAD_MODULE and the LAUNCH.
func oneThread(heap []byte, ptx, kernel string, more []byte) (load, launch abi.Command) {
	copy(heap[hModule:], ptx)
	copy(heap[hName:], kernel)
	args := append(le.AppendUint64(nil, 5), more...)
	copy(heap[hArgs:], args)
	relocs := hArgs + (len(args)+7)&^7
	le.PutUint32(heap[relocs:], 0) // offset 0: the buffer handle
	le.PutUint32(heap[relocs+4:], abi.RelocBuffer)
	load = abi.Command{Op: abi.OpLoadModule, Handle: 1, Format: abi.ModulePTX, HeapOff: hModule, Length: uint64(len(ptx))}
	launch = abi.Command{Op: abi.OpLaunch, Handle: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1},
		NameOff: hName, NameLen: uint32(len(kernel)), ArgsOff: hArgs, ArgsLen: uint32(len(args)), Relocs: 1}
	return load, launch
}

// globalPTX declares 64 MiB of global memory, which the driver allocates
// when the module loads; touch stores 7 at its last word and copies it
// to p.
const globalPTX = `
.version 7.0
.target sm_70
.address_size 64
.visible .global .align 8 .b8 big[67108864];
.visible .entry touch(.param .u64 p)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [p];
	mov.u64 %rd2, big;
	add.s64 %rd3, %rd2, 67108860;
	mov.u32 %r1, 7;
	st.global.u32 [%rd3], %r1;
	ld.global.u32 %r1, [%rd3];
	st.global.u32 [%rd1], %r1;
	ret;
}
`

// TestGPUModuleQuota: a module's global variables count against the VM's
// quota on the real driver: 64 MiB of them are refused under a 32 MiB
// quota before the driver loads them, and load, run and are charged under
// 128 MiB.
func TestGPUModuleQuota(t *testing.T) {
	b := gpuBackend(t, nil)
	h := mapHeap(t, 1<<20)
	vm, done := attachGPU(t, b, 1, h)
	load, launch := oneThread(h.mem, globalPTX, "touch", nil)
	vm.SetMemoryQuota(32 << 20)
	run := stepper(t, vm, done)
	run(abi.Command{Op: abi.OpAlloc, Handle: 5, Size: 4}, abi.OK)
	run(load, abi.ErrNoMemory)
	if u := vm.MemoryUsed(); u != 4 {
		t.Fatalf("after the refused module the VM uses %d, want 4", u)
	}
	vm.SetMemoryQuota(128 << 20)
	run(load, abi.OK)
	run(launch, abi.OK)
	run(abi.Command{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyDeviceToHost, HeapOff: hOut, Length: 4}, abi.OK)
	if got := le.Uint32(h.mem[hOut:]); got != 7 {
		t.Fatalf("the kernel read %d back from its global, want 7", got)
	}
	u := vm.MemoryUsed()
	t.Logf("a module with 64 MiB of globals: the VM uses %d bytes", u)
	if u < 4+64<<20 || u > 4+64<<20+64<<10 {
		t.Fatalf("the VM uses %d bytes, want 64 MiB and a little", u)
	}
}

// localPTX's kernel uses 64 KiB of local memory a thread: it stores 7 at
// buf[i] and copies it to p.
const localPTX = `
.version 7.0
.target sm_70
.address_size 64
.visible .entry deep(.param .u64 p, .param .u32 i)
{
	.local .align 8 .b8 buf[65536];
	.reg .b64 %rd<5>;
	.reg .b32 %r<3>;
	.reg .b16 %rs<3>;
	ld.param.u64 %rd1, [p];
	ld.param.u32 %r1, [i];
	mov.u64 %rd2, buf;
	cvt.u64.u32 %rd3, %r1;
	add.s64 %rd4, %rd2, %rd3;
	mov.u16 %rs1, 7;
	st.local.u8 [%rd4], %rs1;
	ld.local.u8 %rs2, [%rd4];
	cvt.u32.u16 %r2, %rs2;
	st.global.u32 [%rd1], %r2;
	ret;
}
`

// TestGPULocalMemoryQuota: the local memory the driver holds for a
// kernel's threads counts against the VM's quota: a kernel of 64 KiB a
// thread (on an H100, 17 GB for its 270 336 threads) is refused under a
// 1 GiB quota before it launches, and runs and is charged without one.
func TestGPULocalMemoryQuota(t *testing.T) {
	b := gpuBackend(t, nil)
	h := mapHeap(t, 1<<20)
	vm, done := attachGPU(t, b, 1, h)
	load, launch := oneThread(h.mem, localPTX, "deep", le.AppendUint32(nil, 65535)) // the last byte of buf
	vm.SetMemoryQuota(1 << 30)
	run := stepper(t, vm, done)
	run(abi.Command{Op: abi.OpAlloc, Handle: 5, Size: 4}, abi.OK)
	run(load, abi.OK)
	before := vm.MemoryUsed()
	run(launch, abi.ErrNoMemory)
	if u := vm.MemoryUsed(); u != before {
		t.Fatalf("the refused launch charged %d bytes", u-before)
	}
	vm.SetMemoryQuota(0)
	run(launch, abi.OK)
	run(abi.Command{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyDeviceToHost, HeapOff: hOut, Length: 4}, abi.OK)
	if got := le.Uint32(h.mem[hOut:]); got != 7 {
		t.Fatalf("the kernel read %d back from its local memory, want 7", got)
	}
	grew := vm.MemoryUsed() - before
	t.Logf("MEASURED: a kernel of 64 KiB local memory a thread: the VM was charged %d bytes", grew)
	if grew < 1<<30 {
		t.Fatalf("charged %d bytes for the kernel's local memory, want more than the 1 GiB it was refused under", grew)
	}
	run(launch, abi.OK) // grows nothing
	if u := vm.MemoryUsed() - before; u != grew {
		t.Fatalf("a second launch charged %d bytes more", u-grew)
	}
}
