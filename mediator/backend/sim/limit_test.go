package sim

import (
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall/slotcalltest"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// TestCommandLimit: a command that would run past its VM's limit (and a
// quarter, backend.Deadline) runs to that point and fails with
// ErrTimedOut, its data never moved; the VM's buffers are gone after it;
// another VM's are not; a command at the deadline completes.
func TestCommandLimit(t *testing.T) {
	s := manual(t)
	heap := make([]byte, 64)
	ra, rb := newRecorder(), newRecorder()
	a, err := s.Attach(backend.VMSpec{ID: 1, Channels: 1, Heap: heap, MaxCommandNs: 100 * us, Complete: ra.complete})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Attach(backend.VMSpec{ID: 2, Channels: 1, Heap: heap, Complete: rb.complete})
	if err != nil {
		t.Fatal(err)
	}
	big := uint64(200 * us * 1e12 / 1e9) // 200 µs of MEMSET at the default 1T/s
	step := func(v backend.VM, r *recorder, c abi.Command, want abi.ErrorCode) backend.Completion {
		t.Helper()
		n := len(r.all())
		submit(t, v, 0, c, uint64(n))
		run(t, s)
		got := r.wait(t, n+1)[n]
		if got.Code != want {
			t.Fatalf("%v: %v, want %v", c.Op, got.Code, want)
		}
		return got
	}
	step(a, ra, abi.Command{Op: abi.OpAlloc, Handle: 1, Size: big}, abi.OK)
	step(b, rb, abi.Command{Op: abi.OpAlloc, Handle: 1, Size: big}, abi.OK)
	step(a, ra, throttle(100*us), abi.OK)
	step(a, ra, throttle(125*us), abi.OK) // at the deadline
	c := step(a, ra, abi.Command{Op: abi.OpMemset, Handle: 1, Length: big, Value: 1}, abi.ErrTimedOut)
	if d := c.End - c.Start; d != 125*us {
		t.Errorf("the timed-out MEMSET ran %d ns, want the deadline %d", d, 125*us)
	}
	lim := a.(backend.CommandLimit)
	if n := lim.Timeouts(); n != 1 {
		t.Errorf("%d timeouts, want 1", n)
	}
	step(a, ra, abi.Command{Op: abi.OpMemset, Handle: 1, Length: 8}, abi.ErrBadHandle) // gone
	if u := a.(backend.MemoryQuota).MemoryUsed(); u != 0 {
		t.Errorf("VM a holds %d bytes after its timeout", u)
	}
	step(b, rb, abi.Command{Op: abi.OpMemset, Handle: 1, Length: big, Value: 1}, abi.OK) // no limit
	step(a, ra, throttle(126*us), abi.ErrTimedOut)
	lim.SetMaxCommand(0)
	step(a, ra, throttle(126*us), abi.OK)
	if n := b.(backend.CommandLimit).Timeouts(); n != 0 {
		t.Errorf("VM b: %d timeouts", n)
	}
}

// TestProgramLimit: a program whose calls are never served runs until the
// limit ends it with ErrTimedOut; its module is gone after.
func TestProgramLimit(t *testing.T) {
	for _, clock := range []string{"wall", "virtual"} {
		t.Run(clock, func(t *testing.T) {
			e := newProgEnv(t, newSim(t, clock, nil), 8, nil, slotcalltest.Options{})
			e.v.(backend.CommandLimit).SetMaxCommand(int64(20 * time.Millisecond))
			b := prog{slots: 1, gran: abi.ProgKernel, flags: abi.SysFlagBlocking, iterations: 1}.blob(abi.NullBlobSize)
			launch := e.launchCmd(abi.KernelSysNull, 1, 1, b, stdRelocs())
			c := e.do(launch)
			if c.Code != abi.ErrTimedOut {
				t.Fatalf("an unserved program: %+v, want %v", c, abi.ErrTimedOut)
			}
			if d := c.End - c.Start; d < 25*int64(time.Millisecond) {
				t.Errorf("ended after %v, before the deadline", time.Duration(d))
			}
			if n := e.v.(backend.CommandLimit).Timeouts(); n != 1 {
				t.Errorf("%d timeouts, want 1", n)
			}
			if c := e.do(launch); c.Code != abi.ErrBadHandle {
				t.Errorf("a launch of the module of before: %v, want %v", c.Code, abi.ErrBadHandle)
			}
		})
	}
}
