package cuda

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// attachLimited attaches a VM whose commands may run limit each.
func (r *rig) attachLimited(id uint32, heap []byte, limit time.Duration, done chan backend.Completion) *cudaVM {
	r.t.Helper()
	vm, err := r.b.Attach(backend.VMSpec{ID: id, Name: "vm", Channels: 2, Heap: heap, MaxCommandNs: int64(limit),
		Complete: func(c backend.Completion) { done <- c }})
	if err != nil {
		r.t.Fatal(err)
	}
	return vm.(*cudaVM)
}

// TestWatchdogKillsAHungKernel: a kernel that never ends gets its VM's
// worker killed: the command and the VM's others in flight (on another
// channel too) fail with ErrTimedOut, the kill is counted, a fresh worker
// starts without the old module, and another VM's commands complete all
// the while.
func TestWatchdogKillsAHungKernel(t *testing.T) {
	r := newRig(t, map[string]string{"stall_check": "1ms", "restart_delay": "10ms"})
	doneA, doneB := make(chan backend.Completion, 64), make(chan backend.Completion, 64)
	heap, load, launch := launchHeap(".entry hang(\n)", "hang", nil, nil)
	a := r.attachLimited(1, heap, 20*time.Millisecond, doneA)
	b := r.attachLimited(2, make([]byte, 4096), 20*time.Millisecond, doneB)
	first := r.w(a)

	r.submit(a, 0, load, 0)
	if c := wait(t, doneA, 1)[0]; c.Code != abi.OK {
		t.Fatalf("load: %+v", c)
	}
	r.f.setHold(true) // channel 1's command waits on its stream: in flight
	r.submit(a, 1, abi.Command{Op: abi.OpNop}, 100)
	r.settle(a)
	r.f.setHold(false)
	r.submit(a, 0, launch, 1)
	r.submit(a, 0, abi.Command{Op: abi.OpNop}, 2) // queued behind the hung kernel
	// B goes on while A's kernel hangs and after its worker is killed.
	for i := range 20 {
		r.submit(b, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 1000}, uint64(i))
		if c := wait(t, doneB, 1)[0]; c.Code != abi.OK {
			t.Fatalf("B's command %d: %+v", i, c)
		}
	}
	got := wait(t, doneA, 3)
	want := map[uint64]bool{1: true, 2: true, 100: true}
	for _, c := range got {
		if !want[c.Tag] || c.Code != abi.ErrTimedOut {
			t.Errorf("A's completion %+v, want tags 1, 2, 100 with %v", c, abi.ErrTimedOut)
		}
		delete(want, c.Tag)
	}
	if n := a.Timeouts(); n != 1 {
		t.Errorf("A's timeouts %d, want 1", n)
	}
	if n := b.Timeouts(); n != 0 {
		t.Errorf("B's timeouts %d", n)
	}
	if f := a.Fault(); f != nil && !errors.Is(f, errWatchdog) {
		t.Errorf("A's fault %v, want the watchdog's", f)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Restarts() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no fresh worker 10s after the kill")
		}
		time.Sleep(time.Millisecond)
	}
	if r.w(a) == first {
		t.Fatal("the same worker after the kill")
	}
	// A fresh context: the module is gone; new work runs.
	r.submit(a, 0, launch, 3)
	r.submit(a, 0, abi.Command{Op: abi.OpThrottle, DurationNs: 700}, 4)
	got = wait(t, doneA, 2)
	if got[0].Code != abi.ErrBadHandle || got[1].Code != abi.OK {
		t.Fatalf("after the restart: %v, %v; want bad handle, ok", got[0].Code, got[1].Code)
	}
	if ns, _, _ := r.b.GroundTruth(2); ns != 20*1000 {
		t.Errorf("B's ground truth %d ns, want %d", ns, 20*1000)
	}
}

// TestWatchdogCountsOnlyRunningTime: a command whose start marker has not
// come (the GPU has not reached it) is not killed however long it waits,
// and a command queued behind a running one gains no time on the
// watchdog's clock.
func TestWatchdogCountsOnlyRunningTime(t *testing.T) {
	r := newRig(t, nil)
	done := make(chan backend.Completion, 64)
	vm := r.attachLimited(1, nil, 5*time.Millisecond, done)
	r.f.setHold(true)
	r.submit(vm, 0, abi.Command{Op: abi.OpFence, Value: 1}, 0)
	r.submit(vm, 0, abi.Command{Op: abi.OpFence, Value: 2}, 1)
	r.settle(vm)
	time.Sleep(100 * time.Millisecond) // 20 limits, not started
	if n := vm.Timeouts(); n != 0 {
		t.Fatalf("%d timeouts for commands that never started", n)
	}
	vm.SetMaxCommand(int64(time.Hour))
	r.f.release(1) // the first command's start marker: it runs
	ch := vm.chans[0]
	deadline := time.Now().Add(10 * time.Second)
	for {
		ch.mu.Lock()
		ran, queued := ch.q[0].ran, ch.q[1].ran
		ch.mu.Unlock()
		if queued != 0 {
			t.Fatalf("the queued command gained %v ns", queued)
		}
		if ran > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the running command gained no time in 10s")
		}
		time.Sleep(time.Millisecond)
	}
	r.f.setHold(false)
	r.f.release(100)
	codes(t, wait(t, done, 2), abi.OK, abi.OK)
	if n := vm.Timeouts(); n != 0 {
		t.Fatalf("%d timeouts", n)
	}
}

// TestWatchdogShareOfTheGPU: a command's clock runs at its VM's share of
// the GPU: half the wall time while another VM runs too, and the whole of
// it for each of a VM's channels.
func TestWatchdogShareOfTheGPU(t *testing.T) {
	b := &Backend{}
	mk := func(id uint32) *cudaVM { return &cudaVM{b: b, id: id} }
	va, vb := mk(1), mk(2)
	a0, a1, b0 := &channel{vm: va}, &channel{vm: va, idx: 1}, &channel{vm: vb}
	for _, ch := range []*channel{a0, a1, b0} {
		ch.q = []item{{seq: 1}}
	}
	b.running = []runRef{{a0, 1}, {a1, 1}, {b0, 1}}
	b.now1 = b.running // running at both ends of the interval
	b.credit(1000)
	for name, tc := range map[string]struct {
		ch       *channel
		ran, gpu float64
	}{"a0": {a0, 500, 250}, "a1": {a1, 500, 250}, "b0": {b0, 500, 500}} {
		if it := tc.ch.q[0]; it.ran != tc.ran || it.gpu != tc.gpu {
			t.Errorf("%s: ran %v, billed %v; want %v, %v", name, it.ran, it.gpu, tc.ran, tc.gpu)
		}
	}
	va.maxCommand.Store(399)
	if _, late := a0.overdue(1); !late {
		t.Error("500 ns ran is not past a limit of 399 (498 with the quarter)")
	}
	va.maxCommand.Store(401)
	if _, late := a0.overdue(1); late {
		t.Error("500 ns ran is past a limit of 401 (501 with the quarter)")
	}
	va.maxCommand.Store(0)
	if _, late := a0.overdue(1); late {
		t.Error("past no limit")
	}
}

// TestWatchdogLimitLoweredWhileRunning: a limit lowered below what a
// running command has run ends it.
func TestWatchdogLimitLoweredWhileRunning(t *testing.T) {
	r := newRig(t, map[string]string{"restart_delay": "1h"})
	done := make(chan backend.Completion, 64)
	vm := r.attachLimited(1, nil, time.Hour, done)
	r.f.setHold(true)
	r.submit(vm, 0, abi.Command{Op: abi.OpFence, Value: 1}, 0)
	r.settle(vm)
	r.f.release(1) // its start marker: it runs, and never ends while held
	ch := vm.chans[0]
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		ch.mu.Lock()
		ran := ch.q[0].ran
		ch.mu.Unlock()
		if ran > 1000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the running command gained no time in 10s")
		}
	}
	vm.SetMaxCommand(1) // 1 ns: it is past it at the next sweep
	if c := wait(t, done, 1)[0]; c.Code != abi.ErrTimedOut {
		t.Fatalf("%+v, want %v", c, abi.ErrTimedOut)
	}
	if n := vm.Timeouts(); n != 1 {
		t.Fatalf("%d timeouts, want 1", n)
	}
	// No worker yet (restart in an hour): new commands fail as the old did.
	r.submit(vm, 0, abi.Command{Op: abi.OpNop}, 1)
	if c := wait(t, done, 1)[0]; c.Code != abi.ErrTimedOut {
		t.Fatalf("a command before the fresh worker: %+v, want %v", c, abi.ErrTimedOut)
	}
}
