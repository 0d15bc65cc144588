package sim

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// cmdRate submits batch commands of cmds (cycled) on one channel of one
// VM of a manually driven virtual sim and runs them to the end, b.N
// times: ns/op is per command, host time (the timeline is virtual).
func cmdRate(b *testing.B, heap []byte, setup, cmds []abi.Command) {
	s := manual(b, "cmd", "0s", "memset", "0s", "copy", "0s")
	r := newRecorder()
	v, err := s.Attach(backend.VMSpec{ID: 1, Channels: 1, Heap: heap, Complete: r.complete})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range setup {
		if err := v.Submit(0, c, 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.RunUntilIdle(); err != nil {
		b.Fatal(err)
	}
	const batch = 64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		for j := range min(batch, b.N-i) {
			if err := v.Submit(0, cmds[(i+j)%len(cmds)], 0); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.RunUntilIdle(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	for _, c := range r.all() {
		if c.Code != abi.OK {
			b.Fatalf("%v: %v", c.Op, c.Code)
		}
	}
}

// BenchmarkCommandRate is the sim's host cost per command: small commands
// (NOP, FENCE), ALLOC and FREE of distinct handles, small COPYs into a
// buffer, 1 MiB COPYs of whole pages, and MEMSETs of part of a page.
func BenchmarkCommandRate(b *testing.B) {
	heap := make([]byte, 64<<10)
	for i := range heap {
		heap[i] = byte(i)
	}
	b.Run("nop-fence", func(b *testing.B) {
		cmdRate(b, heap, nil, []abi.Command{{Op: abi.OpNop}, {Op: abi.OpFence}})
	})
	b.Run("alloc-free", func(b *testing.B) {
		var cmds []abi.Command
		for h := uint32(1); h <= 32; h++ {
			cmds = append(cmds, abi.Command{Op: abi.OpAlloc, Handle: h, Size: 1 << 20})
		}
		for h := uint32(1); h <= 32; h++ {
			cmds = append(cmds, abi.Command{Op: abi.OpFree, Handle: h})
		}
		cmdRate(b, heap, nil, cmds)
	})
	alloc := []abi.Command{{Op: abi.OpAlloc, Handle: 1, Size: 16 << 20}}
	b.Run("copy-4KiB", func(b *testing.B) {
		var cmds []abi.Command
		for i := range uint64(64) {
			cmds = append(cmds, abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, Offset: i * 37 << 10, HeapOff: i * 512, Length: 4 << 10})
		}
		cmdRate(b, heap, alloc, cmds)
	})
	b.Run("copy-1MiB", func(b *testing.B) {
		big := make([]byte, 1<<20)
		for i := range big {
			big[i] = byte(i * 7)
		}
		var cmds []abi.Command
		for i := range uint64(8) {
			cmds = append(cmds, abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, Offset: i << 20, Length: 1 << 20})
		}
		cmdRate(b, big, alloc, cmds)
	})
	b.Run("memset-1KiB", func(b *testing.B) {
		var cmds []abi.Command
		for i := range uint64(64) {
			cmds = append(cmds, abi.Command{Op: abi.OpMemset, Handle: 1, Offset: i * 129 << 10, Length: 1 << 10, Value: i + 1})
		}
		cmdRate(b, heap, alloc, cmds)
	})
}
