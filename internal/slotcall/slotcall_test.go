package slotcall_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/internal/slotcall"
	"github.com/sluice-gpu/sluice/internal/slotcall/slotcalltest"
)

func newArea(t *testing.T, slots int) ([]byte, *slotcall.Area) {
	t.Helper()
	b := make([]byte, abi.SyscallAreaSize(slots))
	a, err := slotcall.New(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, a.WithTimeout(30 * time.Second)
}

// echo answers a call with its first argument plus its number, errno its
// second argument.
func echo(_ uint32, s abi.Slot) slotcall.Result {
	return slotcall.Result{Ret: int64(s.Args[0]) + int64(s.Number), Errno: abi.Errno(s.Args[1])}
}

func TestCallRoundTrip(t *testing.T) {
	b, a := newArea(t, 64)
	h := slotcalltest.Start(b, echo, slotcalltest.Options{})
	defer h.Stop()
	for i := range uint64(5) {
		r, err := a.Call(3, slotcall.Request{Number: abi.SysNull, Flags: abi.SysFlagBlocking, Args: [6]uint64{i, 7}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Ret != int64(i)+int64(abi.SysNull) || r.Errno != 7 {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	if st, seq := a.State(3); st != abi.SlotFree || seq != 5 {
		t.Errorf("slot 3 after 5 calls: %v seq %d", st, seq)
	}
	if _, err := a.Call(64, slotcall.Request{}); !errors.Is(err, slotcall.ErrRange) {
		t.Errorf("slot 64: %v", err)
	}
}

func TestNonBlocking(t *testing.T) {
	b, a := newArea(t, 64)
	var got atomic.Int64
	h := slotcalltest.Start(b, func(_ uint32, s abi.Slot) slotcall.Result {
		got.Add(int64(s.Args[0]))
		return slotcall.Result{}
	}, slotcalltest.Options{})
	defer h.Stop()
	for i := range 10 {
		// One slot: each call waits for the host to free the previous one.
		if _, err := a.Call(0, slotcall.Request{Number: abi.SysWrite, Args: [6]uint64{uint64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Claim(0); err != nil { // the host freed the last one too
		t.Fatal(err)
	}
	if h.NonBlocking() != 10 || got.Load() != 45 {
		t.Errorf("non-blocking %d, sum %d", h.NonBlocking(), got.Load())
	}
	if _, seq := a.State(0); seq != 10 {
		t.Errorf("seq %d", seq)
	}
}

func TestSharedSlotsTakeTurns(t *testing.T) {
	b, a := newArea(t, 64)
	var inSlot [4]atomic.Int32
	h := slotcalltest.Start(b, func(i uint32, s abi.Slot) slotcall.Result {
		if n := inSlot[i].Add(1); n != 1 {
			t.Errorf("slot %d served %d calls at once", i, n)
		}
		defer inSlot[i].Add(-1)
		return slotcall.Result{Ret: int64(s.Args[0])}
	}, slotcalltest.Options{})
	defer h.Stop()
	const callers, calls = 32, 20
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range calls {
				v := uint64(c*1000 + k)
				r, err := a.Call(uint32(c%4), slotcall.Request{Number: abi.SysNull, Flags: abi.SysFlagBlocking, Args: [6]uint64{v}})
				if err != nil || r.Ret != int64(v) {
					t.Errorf("caller %d: %+v %v", c, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := range uint32(4) {
		if st, seq := a.State(i); st != abi.SlotFree || seq != callers/4*calls {
			t.Errorf("slot %d: %v seq %d", i, st, seq)
		}
	}
}

func TestAbortAndTimeout(t *testing.T) {
	_, a := newArea(t, 64)
	stop := make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := a.WithStop(stop).Call(1, slotcall.Request{Number: abi.SysNull, Flags: abi.SysFlagBlocking})
		done <- err
	}()
	time.Sleep(5 * time.Millisecond)
	close(stop)
	if err := <-done; !errors.Is(err, slotcall.ErrAborted) {
		t.Errorf("aborted wait: %v", err)
	}
	// The slot is still READY: claiming it waits, until the timeout.
	start := time.Now()
	if _, err := a.WithTimeout(20 * time.Millisecond).Claim(1); !errors.Is(err, slotcall.ErrTimeout) {
		t.Errorf("claim of a busy slot: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %v", d)
	}
}

func TestLost(t *testing.T) {
	b, a := newArea(t, 64)
	r := shm.New(b)
	tk, err := a.Claim(2)
	if err != nil {
		t.Fatal(err)
	}
	a.Publish(tk, slotcall.Request{Number: abi.SysNull, Flags: abi.SysFlagBlocking})
	// A scribbler frees the slot under the caller's feet.
	r.Store32(abi.SlotOff(2), abi.SlotWord(abi.SlotFree, 9))
	if _, err := a.Wait(tk); !errors.Is(err, slotcall.ErrLost) {
		t.Errorf("wait on a scribbled slot: %v", err)
	}
	// Finished with another sequence number: lost as well.
	r.Store32(abi.SlotOff(2), abi.SlotWord(abi.SlotFinished, tk.Seq+1))
	if _, err := a.Wait(tk); !errors.Is(err, slotcall.ErrLost) {
		t.Errorf("stale completion: %v", err)
	}
}

func TestNew(t *testing.T) {
	if _, err := slotcall.New(make([]byte, abi.PageSize)); err == nil {
		t.Error("an area without slots")
	}
	b := make([]byte, abi.SyscallAreaSize(64)+8)
	if _, err := slotcall.New(b[1 : 1+abi.SyscallAreaSize(64)]); err == nil {
		t.Error("a misaligned area")
	}
	a, err := slotcall.New(b)
	if err != nil || a.Slots() != 64 {
		t.Fatalf("%v %v", a, err)
	}
	if _, err := slotcall.NewInRegion(shm.New(b), 16, 64); err == nil {
		t.Error("an area past the region's end")
	}
}
