package cuda

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// BenchmarkDepth1 is a depth-1 loop on the fake driver: each completion's
// callback submits the next NOP, as a guest waiting on each command does.
// It measures the host's part of a command's round trip (Submit, the
// worker's ring read, the completer's sweep and delivery), with no GPU
// latency in it, and its allocations.
func BenchmarkDepth1(b *testing.B) {
	f := newFake()
	p := &inProcess{d: f}
	be, err := open(f, backend.Options{Clock: "wall"}, p.spawn)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	done := make(chan struct{})
	var vm backend.VM
	left := 0
	vm, err = be.Attach(backend.VMSpec{ID: 1, Name: "vm", Channels: 1, Heap: make([]byte, 1<<16),
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
