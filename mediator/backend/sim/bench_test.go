package sim

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// BenchmarkVirtualThroughput runs closed-loop throttle VMs (a 100 µs kernel,
// then 100 µs of virtual sleep, repeat), each on one channel, on a manually
// driven virtual sim; every iteration simulates another 100 ms. sim-s/s is
// simulated seconds per wall second.
func BenchmarkVirtualThroughput(b *testing.B) {
	for _, n := range []int{2, 64} {
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			s := manual(b)
			kernel := throttle(100 * us)
			for i := range n {
				var v backend.VM
				var again func()
				again = func() {
					if err := v.Submit(0, kernel, 0); err != nil {
						b.Error(err)
					}
				}
				complete := func(backend.Completion) { s.After(100*us, again) }
				var err error
				v, err = s.Attach(backend.VMSpec{ID: uint32(i), Channels: 1, Complete: complete})
				if err != nil {
					b.Fatal(err)
				}
				again()
			}
			const step = 100 * time1ms
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				if err := s.Run(int64(i+1) * step); err != nil {
					b.Fatal(err)
				}
			}
			wall := time.Since(start).Seconds()
			st := s.Stats()
			b.ReportMetric(float64(st.Now)/1e9/wall, "sim-s/s")
			b.ReportMetric(float64(st.Events)/wall, "events/s")
			b.ReportMetric(float64(s.EngineBusy(Compute))/float64(st.Now), "util")
		})
	}
}

// BenchmarkWallLateness measures how late, in wall time, completions are
// delivered after their End with the wall clock: one VM runs 200 µs
// throttles back to back, submitting the next from the completion. With
// spin_ns the backend goroutine spins for the last stretch instead of
// trusting its timer.
func BenchmarkWallLateness(b *testing.B) {
	for _, spin := range []string{"0", "50000", "1500000"} {
		b.Run("spin_ns="+spin, func(b *testing.B) {
			s := newSim(b, "wall", map[string]string{"spin_ns": spin})
			var v backend.VM
			late := make([]int64, 0, b.N)
			done := make(chan struct{})
			complete := func(c backend.Completion) {
				late = append(late, s.Clock().Now()-c.End)
				if len(late) == b.N {
					close(done)
					return
				}
				if err := v.Submit(0, throttle(200*us), 0); err != nil {
					b.Error(err)
				}
			}
			var err error
			v, err = s.Attach(backend.VMSpec{ID: 1, Channels: 1, Complete: complete})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			if err := v.Submit(0, throttle(200*us), 0); err != nil {
				b.Fatal(err)
			}
			<-done
			b.StopTimer()
			slices.Sort(late)
			b.ReportMetric(float64(late[len(late)/2])/1e3, "p50-late-µs")
			b.ReportMetric(float64(late[len(late)*99/100])/1e3, "p99-late-µs")
		})
	}
}

// BenchmarkMoveIsolation: VM B runs 10 µs kernels one at a time (b.N of
// them) on the wall clock while VM A keeps its channel full of large data
// movements: none, 1 GiB MEMSETs at an odd offset (whole pages are filled
// by reference, so mostly bookkeeping), or 64 MiB device-to-device COPYs at
// an odd offset (a real memmove each). B's kernels/s is what A's movements
// leave it; A-GiB/s is the data A moved per wall second.
func BenchmarkMoveIsolation(b *testing.B) {
	hogs := []struct {
		name string
		cmd  abi.Command
	}{
		{"none", abi.Command{}},
		{"memset-1GiB", abi.Command{Op: abi.OpMemset, Handle: 1, Offset: 1, Length: 1<<30 - 1, Value: 3}},
		{"copy-64MiB", abi.Command{Op: abi.OpCopy, Dir: abi.CopyDeviceToDevice, Handle: 2, SrcHandle: 1, Offset: 1, HeapOff: 0, Length: 64 << 20}},
	}
	for _, hog := range hogs {
		b.Run("hog="+hog.name, func(b *testing.B) {
			s := newSim(b, "wall", map[string]string{"memory": "4Gi"})
			var moved atomic.Int64
			var stop atomic.Bool
			var a backend.VM
			again := func(c backend.Completion) {
				if c.Code != abi.OK {
					b.Errorf("A: %+v", c)
					return
				}
				if c.Op == hog.cmd.Op && hog.cmd.Op != 0 {
					moved.Add(int64(hog.cmd.Length))
				}
				if !stop.Load() && hog.cmd.Op != 0 && c.Op != abi.OpAlloc {
					_ = a.Submit(0, hog.cmd, 0)
				}
			}
			var err error
			if a, err = s.Attach(backend.VMSpec{ID: 1, Channels: 1, Complete: again}); err != nil {
				b.Fatal(err)
			}
			submit(b, a, 0, abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 1 << 30}, 0)
			submit(b, a, 0, abi.Command{Op: abi.OpAlloc, Handle: 2, Size: 1 << 30}, 0)
			if hog.cmd.Op != 0 {
				submit(b, a, 0, hog.cmd, 0)
			}
			done := make(chan struct{}, 1)
			vb, err := s.Attach(backend.VMSpec{ID: 2, Channels: 1, Complete: func(backend.Completion) { done <- struct{}{} }})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				submit(b, vb, 0, throttle(10*us), 0)
				<-done
			}
			wall := time.Since(start).Seconds()
			b.StopTimer()
			stop.Store(true)
			b.ReportMetric(float64(b.N)/wall, "B-kernels/s")
			b.ReportMetric(float64(moved.Load())/wall/(1<<30), "A-GiB/s")
		})
	}
}
