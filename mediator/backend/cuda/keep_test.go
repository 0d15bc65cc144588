package cuda

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/testlog"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/backend/cuda/cubin"
)

// These tests hand GPU workers over between two Backends of this process,
// as sluiced's successor (the same process after exec) takes them over:
// the workers are processes (this test binary as fakeWorkerCommand, on the
// fake driver), so their pids, pidfds, sockets and reaping are real.

// procBackend is a backend whose workers are processes on the fake driver.
func procBackend(t *testing.T) *Backend {
	t.Helper()
	b, err := open(newFake(), backend.Options{}, spawnAs(fakeWorkerCommand))
	if err != nil {
		t.Fatal(err)
	}
	b.needFiles = true
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// Heap layout of the keep tests: a module, a kernel's name and its
// arguments (a buffer handle, relocated), the data and where it comes back.
const (
	kModule = 0
	kName   = 4096
	kArgs   = 4200
	kData   = 8192
	kBack   = 16384
	kSize   = 4096
)

const keepPTX = ".entry scale(\n)"

// kUsed is what the kept VM's buffer and module take of its quota.
var kUsed = kSize + fakeFootprint(keepPTX)

// fakeFootprint is what the fake driver's module of ptx is charged.
func fakeFootprint(ptx string) uint64 {
	img, err := newFake().LinkPTX(append([]byte(ptx), 0))
	if err != nil {
		panic(err)
	}
	n, err := cubin.Footprint(img)
	if err != nil {
		panic(err)
	}
	return n
}

var (
	kAlloc  = abi.Command{Op: abi.OpAlloc, Handle: 3, Size: kSize}
	kFill   = abi.Command{Op: abi.OpCopy, Handle: 3, Dir: abi.CopyHostToDevice, HeapOff: kData, Length: kSize}
	kLoad   = abi.Command{Op: abi.OpLoadModule, Handle: 7, Format: abi.ModulePTX, HeapOff: kModule, Length: uint64(len(keepPTX))}
	kLaunch = abi.Command{Op: abi.OpLaunch, Handle: 7, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1},
		NameOff: kName, NameLen: 5, ArgsOff: kArgs, ArgsLen: 8, Relocs: 1}
	kReadBack = abi.Command{Op: abi.OpCopy, Handle: 3, Dir: abi.CopyDeviceToHost, HeapOff: kBack, Length: kSize}
)

// keptVM attaches a VM to b whose worker holds a filled buffer (handle 3)
// and a module (handle 7), and keeps it.
func keptVM(t *testing.T, b *Backend) (backend.VMSpec, gpuHeap, backend.Kept) {
	t.Helper()
	heap := mapHeap(t, execHeapSize)
	fillKeepHeap(heap.mem)
	done := make(chan backend.Completion, 64)
	spec := backend.VMSpec{ID: 1, Name: "kept", Channels: 2, Heap: heap.mem, HeapFile: &backend.FileRange{FD: heap.fd},
		MemoryQuota: 1 << 20, Complete: func(c backend.Completion) { done <- c }}
	vm, err := b.Attach(spec)
	if err != nil {
		t.Fatal(err)
	}
	v := vm.(*cudaVM)
	for i, c := range []abi.Command{kAlloc, kFill, kLoad} {
		if err := v.Submit(0, c, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Submit(1, abi.Command{Op: abi.OpFence, Value: 1}, 3); err != nil {
		t.Fatal(err)
	}
	for _, c := range wait(t, done, 4) {
		if c.Code != abi.OK {
			t.Fatalf("before the keep: %v: %v", c.Op, c.Code)
		}
	}
	if u := v.MemoryUsed(); u != kUsed {
		t.Fatalf("the VM uses %d bytes, want %d", u, kUsed)
	}
	k, err := v.Keep()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeFDs(k.FDs) })
	if k.Backend != "cuda" || len(k.FDs) != keptFDs {
		t.Fatalf("kept %q with %d descriptors", k.Backend, len(k.FDs))
	}
	if err := v.Submit(0, abi.Command{Op: abi.OpNop}, 9); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("submit after Keep: %v, want ErrClosed", err)
	}
	return spec, heap, k
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// keptPid is the pid of a kept worker, by its pidfd.
func keptPid(t *testing.T, k backend.Kept) int {
	t.Helper()
	pid, err := pidOf(k.FDs[keptPidfd])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// alive reports whether pid is a process not yet reaped that has not
// exited (a zombie has).
func alive(pid int) bool {
	return isChild(pid) == nil && unix.Kill(pid, 0) == nil && !zombie(pid)
}

func zombie(pid int) bool {
	stat, err := readStat(pid)
	return err == nil && strings.HasPrefix(stat, "Z")
}

// readStat is pid's /proc stat from its state on.
func readStat(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	i := bytes.LastIndexByte(b, ')')
	return strings.TrimSpace(string(b[i+1:])), nil
}

// reaped waits until pid is no process of ours at all (waited for).
func reaped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); unix.Kill(pid, 0) == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("worker %d is still there (alive %v) 10s after its VM let it go", pid, alive(pid))
		}
	}
}

func TestKeepAdoptWorkerProcess(t *testing.T) {
	b1 := procBackend(t)
	spec, heap, k := keptVM(t, b1)
	pid := keptPid(t, k)
	if err := b1.Close(); err != nil { // the predecessor is done with
		t.Fatal(err)
	}
	if !alive(pid) {
		t.Fatalf("the kept worker %d did not outlive its backend", pid)
	}
	var d keptData
	if err := json.Unmarshal(k.Data, &d); err != nil || d.Buffers != 1 || d.Modules != 1 || d.MemUsed != kUsed || d.Tail != 4 {
		t.Fatalf("kept data %s (%v)", k.Data, err)
	}

	b2 := procBackend(t)
	done := make(chan backend.Completion, 64)
	spec.Complete = func(c backend.Completion) { done <- c }
	spec.Adopt = &k
	vm, err := b2.Attach(spec)
	if err != nil {
		t.Fatal(err)
	}
	closeFDs(k.FDs) // as the caller does: Attach took copies
	k.FDs = nil
	v := vm.(*cudaVM)
	if u := v.MemoryUsed(); u != kUsed {
		t.Errorf("the adopted VM uses %d bytes, want %d", u, kUsed)
	}
	for i := range kSize {
		heap.mem[kBack+i] = 0
	}
	for i, c := range []abi.Command{kReadBack, kLaunch, kAlloc, {Op: abi.OpThrottle, DurationNs: 1000}} {
		if err := v.Submit(0, c, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Submit(1, abi.Command{Op: abi.OpFence, Value: 2}, 4); err != nil {
		t.Fatal(err)
	}
	// Each channel's completions come in its order; the two channels' in
	// any order between them.
	var ch0, ch1 []backend.Completion
	for _, c := range wait(t, done, 5) {
		if c.Channel == 0 {
			ch0 = append(ch0, c)
		} else {
			ch1 = append(ch1, c)
		}
	}
	if len(ch0) != 4 || len(ch1) != 1 {
		t.Fatalf("completions: %d on channel 0, %d on channel 1; want 4 and 1", len(ch0), len(ch1))
	}
	// The buffer and the module are the ones kept; handle 3 is taken.
	codes(t, ch0, abi.OK, abi.OK, abi.ErrBadHandle, abi.OK)
	if ch1[0].Code != abi.OK || ch1[0].Channel != 1 {
		t.Errorf("channel 1 after the adoption: %+v", ch1[0])
	}
	if !bytes.Equal(heap.mem[kBack:kBack+kSize], heap.mem[kData:kData+kSize]) {
		t.Fatal("the buffer read back after the hand-over differs from what was written before it")
	}
	if v.Restarts() != 0 || v.Fault() != nil {
		t.Errorf("restarts %d, fault %v", v.Restarts(), v.Fault())
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	reaped(t, pid)
}

func TestAdoptRefusesAnotherBackendsState(t *testing.T) {
	b1 := procBackend(t)
	spec, _, k := keptVM(t, b1)
	pid := keptPid(t, k)
	b2 := procBackend(t)
	spec.Complete = func(backend.Completion) {}
	// Not the cuda backend's kept state: refused before any of its
	// descriptors is touched, so the worker stays.
	for _, tc := range []struct {
		name string
		k    backend.Kept
	}{
		{"another backend's", backend.Kept{Backend: "sim", FDs: k.FDs, Data: k.Data}},
		{"a descriptor short", backend.Kept{Backend: "cuda", FDs: k.FDs[:3], Data: k.Data}},
		{"a descriptor more", backend.Kept{Backend: "cuda", FDs: append(k.FDs[:4:4], k.FDs[0]), Data: k.Data}},
	} {
		s := spec
		s.Adopt = &tc.k
		if _, err := b2.Attach(s); !errors.Is(err, backend.ErrBadKept) {
			t.Fatalf("%s: %v, want ErrBadKept", tc.name, err)
		}
		if !alive(pid) {
			t.Fatalf("%s: the worker ended", tc.name)
		}
	}
	// And then it adopts.
	spec.Adopt = &k
	vm, err := b2.Attach(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Close(); err != nil {
		t.Fatal(err)
	}
	reaped(t, pid)
}

// alterKept is k's data changed by f.
func alterKept(t *testing.T, k backend.Kept, f func(*keptData)) json.RawMessage {
	t.Helper()
	var d keptData
	if err := json.Unmarshal(k.Data, &d); err != nil {
		t.Fatal(err)
	}
	f(&d)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAdoptEndsAWorkerThatDoesNotCheckOut refuses kept states of the
// cuda backend that do not check out (the data, the VM's files, a
// descriptor, the shared block, the worker's answer): the worker, known
// by its pidfd, is ended and reaped, and the VM attached afresh has none
// of its handles.
func TestAdoptEndsAWorkerThatDoesNotCheckOut(t *testing.T) {
	other := mapHeap(t, 32<<10)
	for _, tc := range []struct {
		name string
		f    func(*keptData)
		fds  func([]int) []int
		data string
		spec func(*backend.VMSpec)
	}{
		{name: "bad data", data: `{"protocol":`},
		{name: "another protocol", f: func(d *keptData) { d.Protocol++ }},
		{name: "a channel short", f: func(d *keptData) { d.Seqs = d.Seqs[:1] }},
		{name: "ends past the commands", f: func(d *keptData) { d.Ends[0] = d.Seqs[0] + 1 }},
		{name: "another heap", spec: func(s *backend.VMSpec) { s.Heap, s.HeapFile = other.mem, &backend.FileRange{FD: other.fd} }},
		{name: "more in flight", spec: func(s *backend.VMSpec) { s.MaxInFlight = 4096 }},
		{"the ring elsewhere", func(d *keptData) { d.Tail++ }, nil, "", nil},
		{name: "a channel elsewhere", f: func(d *keptData) { d.Ends[1], d.Seqs[1] = 0, 0 }},
		{name: "a buffer more", f: func(d *keptData) { d.Buffers++ }},
		{name: "a module less", f: func(d *keptData) { d.Modules-- }},
		{name: "other memory use", f: func(d *keptData) { d.MemUsed++ }},
		{name: "no doorbell", fds: func(fds []int) []int { return []int{fds[0], fds[1], fds[3], fds[3]} }},
		{name: "no shared block", fds: func(fds []int) []int { return []int{fds[0], fds[2], fds[2], fds[3]} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b1 := procBackend(t)
			spec, _, k := keptVM(t, b1)
			pid := keptPid(t, k)
			b2 := procBackend(t)
			bad := k
			if tc.f != nil {
				bad.Data = alterKept(t, k, tc.f)
			}
			if tc.data != "" {
				bad.Data = json.RawMessage(tc.data)
			}
			if tc.fds != nil {
				bad.FDs = tc.fds(k.FDs)
			}
			s := spec
			if tc.spec != nil {
				tc.spec(&s)
			}
			s.Adopt = &bad
			_, err := b2.Attach(s)
			if !errors.Is(err, backend.ErrBadKept) {
				t.Fatalf("%v, want ErrBadKept", err)
			}
			t.Logf("as expected: %v", err)
			reaped(t, pid)
			spec.Adopt = &k
			if _, err := b2.Attach(spec); !errors.Is(err, backend.ErrBadKept) {
				t.Fatalf("adopting a reaped worker: %v, want ErrBadKept", err)
			}
			freshAfterRefusal(t, b2, spec)
		})
	}
}

// TestAdoptNeverSignalsAnUnprovedProcess refuses kept states whose
// process is not proved the worker of its socket: nothing is signalled
// (before, a refusal killed whatever child of ours the pidfd named).
func TestAdoptNeverSignalsAnUnprovedProcess(t *testing.T) {
	logs := testlog.Capture(t)
	other := exec.Command("sleep", "30") // a child of ours that is no worker
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	otherFD, err := unix.PidfdOpen(other.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(otherFD)
	b1 := procBackend(t)
	spec, _, k := keptVM(t, b1)
	pid := keptPid(t, k)
	b2 := procBackend(t)
	for _, tc := range []struct {
		name string
		fds  []int
		data json.RawMessage
	}{
		// The worker's pidfd, but no socket: it cannot be asked.
		{"no socket", []int{k.FDs[1], k.FDs[1], k.FDs[2], k.FDs[3]}, k.Data},
		// The worker answers, but the pidfd is another's: the worker is
		// told to stop on its socket.
		{"another process's pidfd", []int{k.FDs[0], k.FDs[1], k.FDs[2], otherFD}, k.Data},
		{"another process's pidfd, bad data", []int{k.FDs[0], k.FDs[1], k.FDs[2], otherFD}, json.RawMessage(`{"protocol":`)},
	} {
		s := spec
		s.Adopt = &backend.Kept{Backend: "cuda", FDs: tc.fds, Data: tc.data}
		if _, err := b2.Attach(s); !errors.Is(err, backend.ErrBadKept) {
			t.Fatalf("%s: %v, want ErrBadKept", tc.name, err)
		} else {
			t.Logf("%s: as expected: %v", tc.name, err)
		}
		if !alive(other.Process.Pid) {
			t.Fatalf("%s: the refusal signalled process %d, which is no worker", tc.name, other.Process.Pid)
		}
	}
	// The worker itself, told to stop on its socket, ends by itself, and
	// the refusal that let go of its pidfd ("no socket") reaps it.
	logs.Wait(t, fmt.Sprintf(`pid=%d how="exit status 0"`, pid), 10*time.Second)
	reaped(t, pid)
}

// TestKeepRacingClose keeps a VM whose command does not end while the
// backend closes: Close waits for the Keep, whose wait runs out and which
// then closes the VM as Close would (before, Close stopped the completer
// under it and the Keep waited forever for its command's delivery).
func TestKeepRacingClose(t *testing.T) {
	r, vm := heldVM(t, 200*time.Millisecond)
	kept := make(chan error, 1)
	go func() { _, err := vm.Keep(); kept <- err }()
	for !isShut(vm) { // Keep is waiting for the command
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- r.b.Close() }()
	for name, ch := range map[string]chan error{"Keep": kept, "Close": closed} {
		select {
		case err := <-ch:
			t.Logf("%s: %v", name, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s hangs", name)
		}
	}
	if c := wait(t, r.done, 1)[0]; c.Code != abi.ErrShutdown {
		t.Fatalf("the command in flight: %v, want ErrShutdown", c.Code)
	}
}

func isShut(v *cudaVM) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.closed
}

// TestAdoptWithoutAPidfd refuses a kept state whose pidfd is not one: the
// worker, told to stop, ends, but cannot be told from the descriptors to
// be reaped.
func TestAdoptWithoutAPidfd(t *testing.T) {
	b1 := procBackend(t)
	spec, _, k := keptVM(t, b1)
	pid := keptPid(t, k)
	b2 := procBackend(t)
	spec.Adopt = &backend.Kept{Backend: "cuda", FDs: []int{k.FDs[0], k.FDs[1], k.FDs[2], k.FDs[2]}, Data: k.Data}
	if _, err := b2.Attach(spec); !errors.Is(err, backend.ErrBadKept) {
		t.Fatalf("%v, want ErrBadKept", err)
	}
	stopped(t, pid)
}

// stopped waits for worker pid, a child of this process told to stop, to
// end, and reaps it: it must have ended as told.
func stopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !zombie(pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the worker did not stop")
		}
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("the worker told to stop: %v, exit status %d", err, ws.ExitStatus())
	}
}

// freshAfterRefusal attaches spec afresh (what vm does when Attach refuses
// the kept state) and checks the old buffer is gone.
func freshAfterRefusal(t *testing.T, b *Backend, spec backend.VMSpec) {
	t.Helper()
	done := make(chan backend.Completion, 8)
	spec.Adopt = nil
	spec.Complete = func(c backend.Completion) { done <- c }
	vm, err := b.Attach(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Submit(0, kReadBack, 0); err != nil {
		t.Fatal(err)
	}
	if err := vm.Submit(0, kLaunch, 1); err != nil {
		t.Fatal(err)
	}
	codes(t, wait(t, done, 2), abi.ErrBadHandle, abi.ErrBadHandle)
}

// TestAdoptAfterTheWorkerDied refuses a kept worker that was killed: the
// refusal reaps it. Its first thread shows as a zombie before the others
// have exited (with -race, tearing the shadow memory down takes a while),
// when a wait finds nothing to reap yet: before, the refusal's one WNOHANG
// wait then left it a zombie for good (6 runs of 20 with -race, alone).
func TestAdoptAfterTheWorkerDied(t *testing.T) {
	logs := testlog.Capture(t)
	b1 := procBackend(t)
	spec, _, k := keptVM(t, b1)
	pid := keptPid(t, k)
	if err := unix.PidfdSendSignal(k.FDs[keptPidfd], unix.SIGKILL, nil, 0); err != nil {
		t.Fatal(err)
	}
	for !zombie(pid) {
		time.Sleep(time.Millisecond)
	}
	b2 := procBackend(t)
	spec.Adopt = &k
	_, err := b2.Attach(spec)
	if !errors.Is(err, backend.ErrBadKept) {
		t.Fatalf("adopting a dead worker: %v, want ErrBadKept", err)
	}
	t.Logf("as expected: %v", err)
	reaped(t, pid) // by the refusal, once every thread of it has exited
	logs.Wait(t, fmt.Sprintf(`pid=%d how="signal: killed"`, pid), 10*time.Second)
	freshAfterRefusal(t, b2, spec)
}

// heldVM is a VM of a rig whose Keep waits keepWait, with a command in
// flight that does not end (the fake driver holds it).
func heldVM(t *testing.T, keepWait time.Duration) (*rig, *cudaVM) {
	t.Helper()
	r := newRig(t, nil)
	r.b.keepWait = keepWait
	vm := r.attach(1, 1, make([]byte, 4096))
	r.f.setHold(true)
	r.submit(vm, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 1000}, 0)
	r.settle(vm)
	return r, vm
}

func TestKeepWaitsForCommandsInFlight(t *testing.T) {
	r, vm := heldVM(t, 50*time.Millisecond)
	_, err := vm.Keep()
	if err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("keeping a VM whose command does not end: %v", err)
	}
	// Closed as Close does: the command completes, and nothing more runs.
	if c := wait(t, r.done, 1)[0]; c.Code != abi.ErrShutdown {
		t.Fatalf("the command in flight: %v, want ErrShutdown", c.Code)
	}
	if err := vm.Submit(0, abi.Command{Op: abi.OpNop}, 1); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("submit after a failed Keep: %v", err)
	}
}

func TestKeepRefusesAWorkerGoroutine(t *testing.T) {
	r := newRig(t, nil)
	vm := r.attach(1, 1, make([]byte, 4096))
	r.submit(vm, 0, abi.Command{Op: abi.OpNop}, 0)
	codes(t, wait(t, r.done, 1), abi.OK)
	if _, err := vm.Keep(); err == nil || !strings.Contains(err.Error(), "not a process") {
		t.Fatalf("keeping a worker goroutine: %v", err)
	}
	if _, err := vm.Keep(); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("keeping it again: %v, want ErrClosed", err)
	}
}

func FuzzDecodeKept(f *testing.F) {
	f.Add([]byte(`{"protocol":1,"tail":4,"seqs":[3,1],"ends":[3,1],"buffers":1,"modules":1,"mem_used":4096}`), 2)
	f.Add([]byte(`{"protocol":1,"seqs":[0],"ends":[1]}`), 1)
	f.Add([]byte(`{"protocol":1,"seqs":[],"ends":[],"heap":{"dev":1,"ino":2}}`), 0)
	f.Fuzz(func(t *testing.T, data []byte, channels int) {
		d, err := decodeKept(data, channels)
		if err != nil {
			return
		}
		if d.Protocol != workerProtocol || len(d.Seqs) != channels || len(d.Ends) != channels || d.Buffers < 0 || d.Modules < 0 {
			t.Fatalf("accepted %+v for %d channels", d, channels)
		}
		for i := range d.Seqs {
			if d.Ends[i] > d.Seqs[i] {
				t.Fatalf("accepted channel %d ending past its commands: %+v", i, d)
			}
		}
	})
}
