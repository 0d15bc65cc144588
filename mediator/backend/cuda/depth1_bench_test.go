package cuda

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// fakeBackend is the backend on the fake driver, its workers in process.
func fakeBackend(tb testing.TB) *Backend {
	f := newFake()
	p := &inProcess{d: f}
	be, err := open(f, backend.Options{Clock: "wall"}, p.spawn)
	if err != nil {
		tb.Fatal(err)
	}
	return be
}

// BenchmarkDepth1 is a depth-1 loop on the fake driver: each completion's
// callback submits the next NOP, as a guest waiting on each command does.
// It measures the host's part of a command's round trip (Submit, the
// worker's ring read, the completer's sweep and delivery), with no GPU
// latency in it, and its allocations.
func BenchmarkDepth1(b *testing.B) {
	be := fakeBackend(b)
	defer be.Close()
	done := make(chan struct{})
	var vm backend.VM
	left := 0
	vm, err := be.Attach(backend.VMSpec{ID: 1, Name: "vm", Channels: 1, Heap: make([]byte, 1<<16),
		Complete: func(c backend.Completion) {
			if c.Code != abi.OK {
				b.Errorf("completion %+v", c)
			}
			if left--; left <= 0 {
				done <- struct{}{}
				return
			}
			if err := vm.Submit(0, abi.Command{Op: abi.OpNop}, c.Tag+1); err != nil {
				b.Error(err)
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Close()
	// Warm up (the worker starts), then measure.
	left = 1000
	if err := vm.Submit(0, abi.Command{Op: abi.OpNop}, 0); err != nil {
		b.Fatal(err)
	}
	<-done
	b.ReportAllocs()
	b.ResetTimer()
	left = b.N
	if err := vm.Submit(0, abi.Command{Op: abi.OpNop}, 0); err != nil {
		b.Fatal(err)
	}
	<-done
	b.StopTimer()
	b.ReportMetric(float64(be.inlined.Load())/float64(b.N+1000), "inlined/op")
}

// TestDepth1ManyProcessors runs a depth-1 loop with 8 processors to the Go
// scheduler, where the completer and the deliverer yield only once a
// spin.Period or so (on the build machines, with fewer, they yield often):
// every command completes, in order.
func TestDepth1ManyProcessors(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	be := fakeBackend(t)
	defer be.Close()
	const n = 3000
	done := make(chan error, 1)
	var vm backend.VM
	var next atomic.Uint64
	vm, err := be.Attach(backend.VMSpec{ID: 1, Name: "vm", Channels: 1, Heap: make([]byte, 1<<16),
		Complete: func(c backend.Completion) {
			switch {
			case c.Code != abi.OK || c.Tag != next.Load():
				done <- fmt.Errorf("completion %+v, want tag %d OK", c, next.Load())
				return
			case c.Tag == n-1:
				done <- nil
				return
			}
			if err := vm.Submit(0, abi.Command{Op: abi.OpNop}, next.Add(1)); err != nil {
				done <- err
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	if err := vm.Submit(0, abi.Command{Op: abi.OpNop}, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%d of %d commands completed in a minute", next.Load(), n)
	}
}

// BenchmarkDepth8 keeps 8 NOPs in flight on the fake driver, each
// completion's callback submitting one more: the host's part of a command
// at depth, and its allocations (the fake driver's own included).
func BenchmarkDepth8(b *testing.B) {
	be := fakeBackend(b)
	defer be.Close()
	done := make(chan struct{})
	var vm backend.VM
	var sent, left atomic.Int64 // the round's commands not submitted, not completed
	submit := func() {          // one more of the round's, if any is left
		if sent.Add(-1) < 0 {
			return
		}
		if err := vm.Submit(0, abi.Command{Op: abi.OpNop}, 0); err != nil {
			b.Error(err)
		}
	}
	vm, err := be.Attach(backend.VMSpec{ID: 1, Name: "vm", Channels: 1, Heap: make([]byte, 1<<16),
		Complete: func(c backend.Completion) {
			if c.Code != abi.OK {
				b.Errorf("completion %+v", c)
			}
			submit()
			if left.Add(-1) == 0 {
				done <- struct{}{}
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Close()
	run := func(n int) {
		sent.Store(int64(n))
		left.Store(int64(n))
		for range min(n, 8) {
			submit()
		}
		<-done
	}
	run(1000) // the worker starts
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
}

// TestQueueReusesItsArray: a channel's queue of commands in flight, pushed
// at the back and cut at the front as completions go, allocates nothing
// once its array fits the depth.
func TestQueueReusesItsArray(t *testing.T) {
	for _, depth := range []int{1, 8, 100} {
		var ch channel
		for i := range depth {
			ch.push(item{seq: uint64(i)})
		}
		seq := uint64(depth)
		step := func() {
			ch.q = ch.q[1:]
			ch.push(item{seq: seq})
			seq++
		}
		for range 4 * depth { // the array grows to fit
			step()
		}
		if allocs := testing.AllocsPerRun(1000, step); allocs != 0 {
			t.Errorf("depth %d: %v allocations a command", depth, allocs)
		}
		for i, it := range ch.q {
			if want := seq - uint64(depth) + uint64(i); it.seq != want {
				t.Fatalf("depth %d: queue[%d] is command %d, want %d", depth, i, it.seq, want)
			}
		}
	}
}
