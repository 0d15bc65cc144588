package sim

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

func codes(cs []backend.Completion) []abi.ErrorCode {
	out := make([]abi.ErrorCode, len(cs))
	for i, c := range cs {
		out[i] = c.Code
	}
	return out
}

func TestCloseVirtual(t *testing.T) {
	s := manual(t)
	v1, r1 := attach(t, s, 1, 2, nil)
	v2, r2 := attach(t, s, 2, 1, nil)
	submit(t, v1, 0, abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 100}, 0)
	run(t, s)
	t0 := s.Clock().Now()
	submit(t, v1, 0, throttle(100*us), 1)           // runs
	submit(t, v1, 0, throttle(100*us), 2)           // queued behind it
	submit(t, v1, 1, abi.Command{Op: abi.OpNop}, 3) // queued for the engine
	submit(t, v2, 0, throttle(10*us), 4)            // queued for the engine
	if err := s.Run(t0 + 50*us); err != nil {
		t.Fatal(err)
	}
	if err := v1.Close(); err != nil {
		t.Fatal(err)
	}
	// Close delivered everything before returning: the running command as
	// finished, the rest as shut down, in order.
	got := r1.all()[1:]
	if len(got) != 3 || got[0].Tag != 1 || got[0].Code != abi.OK || got[0].Start != t0 || got[0].End != t0+100*us {
		t.Fatalf("%+v", got)
	}
	if !slices.Equal(codes(got[1:]), []abi.ErrorCode{abi.ErrShutdown, abi.ErrShutdown}) || got[1].End != 0 {
		t.Errorf("%+v", got[1:])
	}
	if err := v1.Submit(0, abi.Command{Op: abi.OpNop}, 9); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Submit after Close: %v", err)
	}
	if err := v1.Close(); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if u := s.Stats().MemoryUsed; u != 0 {
		t.Errorf("%d bytes allocated after Close", u)
	}
	// The command cannot be preempted: it holds the engine until its end.
	var st backend.Status
	s.ReadStatus(&st)
	if len(st.Running) != 1 || st.Running[0].ChannelRef != (backend.ChannelRef{VM: 1}) {
		t.Errorf("status after Close: %+v", st)
	}
	run(t, s)
	if c := r2.all(); len(c) != 1 || c[0].Start != t0+100*us {
		t.Errorf("VM 2: %+v", c)
	}
	if b := s.VMBusy(1); b != 100*us+1000 {
		t.Errorf("VM 1 busy %d", b)
	}
	// The ID is free again.
	if _, err := s.Attach(backend.VMSpec{ID: 1, Channels: 1, Complete: func(backend.Completion) {}}); err != nil {
		t.Error(err)
	}
}

func TestCloseFromCallbackManual(t *testing.T) {
	s := manual(t)
	var v backend.VM
	r := newRecorder()
	r.next = func(c backend.Completion) {
		if c.Tag == 0 {
			if err := v.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	v, _ = s.Attach(backend.VMSpec{ID: 1, Channels: 1, Complete: r.complete})
	for i := range 3 {
		submit(t, v, 0, throttle(us), uint64(i))
	}
	run(t, s)
	// The dispatcher started command 1 when command 0 ended, before the
	// callback ran; only command 2 was still queued.
	if got := codes(r.all()); !slices.Equal(got, []abi.ErrorCode{abi.OK, abi.OK, abi.ErrShutdown}) {
		t.Errorf("%v", got)
	}
}

func TestBackendClose(t *testing.T) {
	for _, clock := range []string{"virtual", "wall"} {
		t.Run(clock, func(t *testing.T) {
			// Virtual time driven by hand: the loop would run the free
			// timeline to the second command's end before Close whenever
			// this goroutine is descheduled between the submits and Close
			// (seen under load), and the test would check nothing.
			s := manual(t)
			if clock == "wall" {
				s = newSim(t, clock, nil)
			}
			v, r := attach(t, s, 1, 1, nil)
			submit(t, v, 0, throttle(2*time1ms), 0)
			submit(t, v, 0, throttle(time1ms), 1)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			got := r.all() // no wait: Close returns after delivering
			if len(got) != 2 || got[0].Code != abi.OK || got[0].Busy() != 2*time1ms || got[1].Code != abi.ErrShutdown {
				t.Fatalf("%+v", got)
			}
			if _, err := s.Attach(backend.VMSpec{ID: 2, Channels: 1, Complete: r.complete}); !errors.Is(err, backend.ErrClosed) {
				t.Errorf("Attach after Close: %v", err)
			}
			if err := v.Submit(0, throttle(1), 2); !errors.Is(err, backend.ErrClosed) {
				t.Errorf("Submit after Close: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
	s := manual(t)
	s.After(10, func() { t.Error("After ran after Close") })
	s.Close()
	if err := s.Run(100); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
}

func TestWallCloseWaitsForRunning(t *testing.T) {
	s := newSim(t, "wall", nil)
	v, r := attach(t, s, 1, 1, nil)
	start := time.Now()
	submit(t, v, 0, throttle(3*time1ms), 0)
	submit(t, v, 0, throttle(3*time1ms), 1)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	got := r.all()
	if !slices.Equal(codes(got), []abi.ErrorCode{abi.OK, abi.ErrShutdown}) {
		t.Fatalf("%+v", got)
	}
	if elapsed < 3*time.Millisecond {
		t.Errorf("Close returned after %v, before the running command ended", elapsed)
	}
}

func TestDriveErrors(t *testing.T) {
	s := newSim(t, "virtual", nil)
	if err := s.Run(1); !errors.Is(err, ErrNotManual) {
		t.Errorf("Run on a loop-driven sim: %v", err)
	}
	m := manual(t)
	var inner error
	m.After(1, func() { inner = m.Run(10) })
	if err := m.Run(5); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inner, ErrDriving) {
		t.Errorf("Run from a callback: %v", inner)
	}
	if ok, err := m.Step(); ok || err != nil {
		t.Errorf("Step with nothing to do: %v %v", ok, err)
	}
	m.After(3, func() {})
	if ok, err := m.Step(); !ok || err != nil || m.Clock().Now() != 8 {
		t.Errorf("Step: %v %v now %d", ok, err, m.Clock().Now())
	}
}

func TestAttachErrors(t *testing.T) {
	s := manual(t)
	attach(t, s, 1, 1, nil)
	bad := []backend.VMSpec{
		{ID: 1, Channels: 1, Complete: func(backend.Completion) {}},
		{ID: 2, Channels: 0, Complete: func(backend.Completion) {}},
		{ID: 2, Channels: abi.MaxChannels + 1, Complete: func(backend.Completion) {}},
		{ID: 2, Channels: 1},
	}
	for _, spec := range bad {
		if _, err := s.Attach(spec); !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("%+v: %v", spec, err)
		}
	}
	v, _ := attach(t, s, 3, 2, nil)
	for _, ch := range []int{-1, 2} {
		if err := v.Submit(ch, throttle(1), 0); !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("channel %d: %v", ch, err)
		}
	}
}

// TestConcurrentSubmit runs several VMs submitting from goroutines of their
// own while a poller reads the status; run it with -race.
func TestConcurrentSubmit(t *testing.T) {
	for _, clock := range []string{"virtual", "wall"} {
		t.Run(clock, func(t *testing.T) {
			s := newSim(t, clock, map[string]string{"cmd_ns": "100"})
			const vms, perVM = 6, 300
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				var st backend.Status
				for {
					select {
					case <-stop:
						return
					default:
						s.ReadStatus(&st)
						s.VMBusy(0)
					}
				}
			})
			recs := make([]*recorder, vms)
			var sub sync.WaitGroup
			for i := range vms {
				v, r := attach(t, s, uint32(i), 2, make([]byte, 64))
				recs[i] = r
				sub.Go(func() {
					for j := range perVM {
						cmd := abi.Command{Op: abi.OpNop}
						switch j % 4 {
						case 1:
							cmd = throttle(int64(j % 3))
						case 2:
							cmd = abi.Command{Op: abi.OpAlloc, Handle: uint32(j), Size: 64}
						case 3:
							cmd = abi.Command{Op: abi.OpCopy, Handle: uint32(j - 1), Dir: abi.CopyHostToDevice, Length: 64}
						}
						if err := v.Submit(j%2, cmd, uint64(j)); err != nil {
							t.Error(err)
						}
					}
				})
			}
			sub.Wait()
			for i, r := range recs {
				got := r.wait(t, perVM)
				last := [2]int64{-1, -1}
				for _, c := range got {
					if int64(c.Tag) <= last[c.Channel] {
						t.Fatalf("VM %d channel %d: tag %d after %d", i, c.Channel, c.Tag, last[c.Channel])
					}
					last[c.Channel] = int64(c.Tag)
				}
			}
			close(stop)
			wg.Wait()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			for i, r := range recs {
				if n := len(r.all()); n != perVM {
					t.Errorf("VM %d: %d completions, want %d", i, n, perVM)
				}
			}
		})
	}
}
