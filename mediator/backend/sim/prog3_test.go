package sim

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/internal/slotcall"
	"github.com/sluice-gpu/sluice/internal/slotcall/slotcalltest"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

func nullBlob(p prog) []byte { return p.blob(abi.NullBlobSize) }

// TestResidency: work-groups are resident in waves. A strong work-group call
// keeps its group resident, so with room for two groups at most two calls
// are in flight; relaxed lets the other work-items leave, and the calls of
// more groups overlap.
func TestResidency(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        prog
		grid     uint32
		block    uint32
		min, max int64
	}{
		{"strong", prog{slots: 64, gran: abi.ProgWorkGroup, order: abi.ProgStrong, flags: abi.SysFlagBlocking, iterations: 1}, 8, 64, 1, 2},
		{"relaxed", prog{slots: 64, gran: abi.ProgWorkGroup, order: abi.ProgRelaxed, flags: abi.SysFlagBlocking, iterations: 1}, 8, 64, 4, 8},
		{"work-item waves", prog{slots: 256, gran: abi.ProgWorkItem, flags: abi.SysFlagBlocking, iterations: 1}, 16, 32, 4, 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The host holds calls until min are in flight (a strong one never
			// gets there: it gives up after a while).
			hold := slotcalltest.Options{Batch: int(tc.min), BatchWait: 5 * time.Second}
			if tc.min == 1 {
				hold = slotcalltest.Options{Batch: 3, BatchWait: 20 * time.Millisecond}
			}
			e := newProgEnv(t, newSim(t, "wall", map[string]string{"resident": "128"}), 256, newFakeFS(nil, nil).serve, hold)
			if c := e.launch(abi.KernelSysNull, tc.grid, tc.block, nullBlob(tc.p), stdRelocs()); c.Code != abi.OK {
				t.Fatalf("%+v", c)
			}
			if m := e.host.MaxReady(); m < tc.min || m > tc.max {
				t.Errorf("%d calls in flight at most, want %d..%d", m, tc.min, tc.max)
			}
		})
	}
}

// TestCloseDuringProgram: a program whose calls nobody serves holds its
// channel until the VM closes; then it ends promptly, ErrShutdown.
func TestCloseDuringProgram(t *testing.T) {
	for _, clock := range []string{"wall", "virtual", "manual"} {
		t.Run(clock, func(t *testing.T) {
			var s *Sim
			if clock == "manual" {
				s = manual(t)
			} else {
				s = newSim(t, clock, nil)
			}
			e := newProgEnv(t, s, 64, nil, slotcalltest.Options{})
			b := nullBlob(prog{slots: 2, gran: abi.ProgWorkItem, flags: abi.SysFlagBlocking, iterations: 5})
			submit(t, e.v, 0, e.launchCmd(abi.KernelSysNull, 4, 8, b, stdRelocs()), 100)
			submit(t, e.v, 0, abi.Command{Op: abi.OpNop}, 101)
			waitRunning(t, s)
			var st backend.Status
			s.ReadStatus(&st)
			if len(st.Running) != 1 || st.Running[0].Channel != 0 || len(st.Active) != 1 {
				t.Errorf("status %+v", st)
			}
			if clock == "manual" {
				if err := s.Run(s.Clock().Now()); err != nil { // Now: nothing to wait for
					t.Fatal(err)
				}
			}
			t0 := time.Now()
			if err := e.v.Close(); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("Close took %v", d)
			}
			got := e.r.wait(t, 2)
			if len(got) != 3 || got[1].Tag != 100 || got[1].Code != abi.ErrShutdown || got[2].Code != abi.ErrShutdown {
				t.Errorf("%+v", got)
			}
		})
	}
}

func TestBackendCloseDuringProgram(t *testing.T) {
	s, err := New(backend.Options{Clock: "wall"})
	if err != nil {
		t.Fatal(err)
	}
	e := newProgEnv(t, s, 64, nil, slotcalltest.Options{})
	submit(t, e.v, 0, e.launchCmd(abi.KernelSysOne, 1, 1, prog{slots: 1}.blob(abi.SysOneBlobSize), stdRelocs()), 5)
	waitRunning(t, s)
	done := make(chan error)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs")
	}
	if got := e.r.all(); len(got) != 2 || got[1].Code != abi.ErrShutdown {
		t.Errorf("%+v", got)
	}
}

// TestVirtualClockHeld: on the virtual timeline a program costs its wall
// duration, and the timeline waits for it: a COPY submitted alongside ends
// at its own cost, not before the program's start.
func TestVirtualClockHeld(t *testing.T) {
	for _, drive := range []string{"loop", "manual"} {
		t.Run(drive, func(t *testing.T) {
			s := newSim(t, "virtual", map[string]string{"drive": drive})
			e := newProgEnv(t, s, 64, newFakeFS(nil, nil).serve, slotcalltest.Options{Delay: 2 * time.Millisecond})
			submit(t, e.v, 0, abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 4096}, 1)
			if s.manual {
				run(t, s)
			}
			e.r.wait(t, 2)
			t0 := s.Clock().Now()
			submit(t, e.v, 0, e.launchCmd(abi.KernelSysNull, 1, 1, nullBlob(prog{slots: 1, gran: abi.ProgKernel, flags: abi.SysFlagBlocking, iterations: 3}), stdRelocs()), 2)
			submit(t, e.v, 1, abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, Length: 4096}, 3)
			if s.manual {
				run(t, s)
			}
			got := e.r.wait(t, 4)
			p, cp := got[2], got[3]
			if p.Tag == 3 {
				p, cp = cp, p
			}
			if p.Code != abi.OK || p.Start != t0 || p.End-p.Start < int64(6*time.Millisecond) {
				t.Errorf("program %+v", p)
			}
			if cp.Code != abi.OK || cp.Start != t0 || cp.End != t0+s.p.Cost(&abi.Command{Op: abi.OpCopy, Length: 4096}) {
				t.Errorf("copy %+v", cp)
			}
			if b := s.VMBusy(1); b != (p.End-p.Start)+(cp.End-cp.Start)+2*s.p.CmdNs {
				t.Errorf("busy %d, program %d copy %d", b, p.End-p.Start, cp.End-cp.Start)
			}
		})
	}
}

// TestHostileParties: a host answering garbage and a guest thread
// scribbling on the slots never panic the sim; the program ends (OK, or
// ErrDevice for a slot it lost) or is aborted by Close.
func TestHostileParties(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var mu sync.Mutex
	e := newProgEnv(t, newSim(t, "wall", nil), 64, func(uint32, abi.Slot) slotcall.Result {
		mu.Lock()
		defer mu.Unlock()
		return slotcall.Result{Ret: int64(r.Uint64()), Errno: abi.Errno(r.Uint32())}
	}, slotcalltest.Options{})
	defer scribble(e.area)()
	blobs := []struct {
		name string
		b    []byte
		rel  [][2]uint32
	}{
		{abi.KernelSysNull, nullBlob(prog{slots: 8, gran: abi.ProgWorkItem, flags: abi.SysFlagBlocking, iterations: 20}), stdRelocs()},
		{abi.KernelSysOne, prog{slots: 8}.blob(abi.SysOneBlobSize), stdRelocs()},
	}
	sweep := prog{slots: 8, gran: abi.ProgWorkGroup, iterations: 3}.blob(abi.SweepBlobSize)
	binary.LittleEndian.PutUint64(sweep[abi.SweepBuf:], hData)
	binary.LittleEndian.PutUint64(sweep[abi.SweepChunk:], 64)
	binary.LittleEndian.PutUint64(sweep[abi.SweepFileSize:], 4096)
	blobs = append(blobs, struct {
		name string
		b    []byte
		rel  [][2]uint32
	}{abi.KernelPreadSwp, sweep, stdRelocs(abi.SweepHeap)})
	for round := range 9 { // one at a time: the name and blob are read when it starts
		bl := blobs[round%len(blobs)]
		submit(t, e.v, 0, e.launchCmd(bl.name, 4, 8, bl.b, bl.rel), uint64(round))
		select {
		case <-e.r.note:
		case <-time.After(300 * time.Millisecond):
		}
		if len(e.r.all()) != round+2 {
			break // stuck: Close aborts it
		}
	}
	done := make(chan struct{})
	go func() { e.v.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs")
	}
	for _, c := range e.r.all()[1:] {
		if c.Code != abi.OK && c.Code != abi.ErrDevice && c.Code != abi.ErrShutdown {
			t.Errorf("%+v", c)
		}
	}
}

// scribble writes random state words and results into the first slots of
// area, as a hostile guest thread would, until the returned func is called.
func scribble(area []byte) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		reg := shm.New(area)
		rs := rand.New(rand.NewPCG(7, 8))
		for {
			select {
			case <-done:
				return
			default:
			}
			i := uint32(rs.IntN(8))
			reg.Store32(abi.SlotOff(i), rs.Uint32()&0x107)
			reg.Store64(abi.SlotOff(i)+abi.SysRet, rs.Uint64())
			time.Sleep(50 * time.Microsecond)
		}
	}()
	return func() { close(done); wg.Wait() }
}
