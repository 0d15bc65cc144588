package channel

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// loopGPU completes nothing itself: it keeps the tag of the one command a
// depth-1 loop has in flight.
type loopGPU struct{ tag uint64 }

func (g *loopGPU) Submit(_ int, _ abi.Command, tag uint64) error { g.tag = tag; return nil }

// BenchmarkDepth1Channel is a channel's part of a depth-1 loop's round
// trip, on a budget as the engine's gate gives one: the completion
// (Complete: books, budget, publication of get), the guest reading get and
// writing its next record and doorbell, and the forwarding (Poll: copy,
// validation, budget) to the backend's Submit.
func BenchmarkDepth1Channel(b *testing.B) {
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 64})
	if err != nil {
		b.Fatal(err)
	}
	region := shm.New(make([]byte, l.RegionSize))
	gpu := &loopGPU{}
	ch := New(0, region, l, abi.DefaultLimits(), gpu)
	ch.SetBudget(NewBudget(2_000_000))
	rec := abi.EncodeCommand(abi.Command{Op: abi.OpThrottle, DurationNs: 10_000})
	off := l.ChannelOff(0)
	put := uint32(0)
	submit := func() {
		region.CopyIn(l.RecordOff(0, put), rec[:])
		put++
		region.Store32(off+abi.ChPut, put)
		ch.Poll()
	}
	submit()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ch.Complete(Completion{Index: uint32(gpu.tag), Op: abi.OpThrottle, Code: abi.OK, BusyNs: 10_000})
		if region.Load32(off+abi.ChGet) != put {
			b.Fatal("get did not move")
		}
		submit()
	}
}
