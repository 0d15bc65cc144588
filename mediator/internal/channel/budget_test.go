package channel

import (
	"math/rand/v2"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// vmRig is one VM of two channels sharing a budget, on a fake GPU that
// keeps what it is given until the test completes it.
type vmRig struct {
	t      *testing.T
	region *shm.Region
	layout abi.Layout
	gpu    *fakeGPU
	b      *Budget
	chans  [2]*Channel
	put    [2]uint32
	flight []submitted // forwarded, not completed, in submission order
	// lowered: the limit went down with more in flight, which it takes
	// nothing back from; check does not hold the flight to it.
	lowered bool
}

func newVMRig(t *testing.T, limit int64) *vmRig {
	t.Helper()
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 2, RingEntries: 64, SyscallSlots: 64})
	if err != nil {
		t.Fatal(err)
	}
	r := &vmRig{t: t, region: shm.New(make([]byte, l.RegionSize)), layout: l, gpu: &fakeGPU{}, b: NewBudget(limit)}
	for i := range r.chans {
		r.chans[i] = New(i, r.region, l, abi.DefaultLimits(), r.gpu)
		r.chans[i].SetBudget(r.b)
	}
	return r
}

func (r *vmRig) write(ch int, cmds ...abi.Command) {
	for _, c := range cmds {
		rec := abi.EncodeCommand(c)
		r.region.CopyIn(r.layout.RecordOff(uint32(ch), r.put[ch]), rec[:])
		r.put[ch]++
	}
	r.region.Store32(r.layout.ChannelOff(uint32(ch))+abi.ChPut, r.put[ch])
	r.chans[ch].Poll()
	r.collect()
}

// collect moves what the GPU was given into flight and checks the bound.
func (r *vmRig) collect() {
	r.flight = append(r.flight, r.gpu.take()...)
	r.check()
}

// check: the estimated time in flight is within the limit, or one command.
func (r *vmRig) check() {
	r.t.Helper()
	var sum int64
	for _, s := range r.flight {
		sum += r.b.Cost(&s.cmd)
	}
	if got := r.b.Stats().InFlightNs; got != sum {
		r.t.Fatalf("budget counts %d ns in flight, the commands in flight cost %d", got, sum)
	}
	if lim := r.b.Limit(); lim > 0 && sum > lim && len(r.flight) > 1 && !r.lowered {
		r.t.Fatalf("%d commands in flight cost %d ns, above the limit %d", len(r.flight), sum, lim)
	}
}

// complete completes the oldest command in flight of channel ch.
func (r *vmRig) complete(ch int) bool {
	for i, s := range r.flight {
		if s.ch == ch {
			r.flight = append(r.flight[:i], r.flight[i+1:]...)
			r.chans[ch].Complete(Completion{Index: uint32(s.tag), Op: s.cmd.Op, BusyNs: int64(s.cmd.DurationNs)})
			r.collect()
			return true
		}
	}
	return false
}

func (r *vmRig) inFlight(ch int) int {
	n := 0
	for _, s := range r.flight {
		if s.ch == ch {
			n++
		}
	}
	return n
}

// us is a microsecond in ns: commands cost at least ControlCostNs.
const us = 1000

func TestBudgetBoundsInFlightTime(t *testing.T) {
	r := newVMRig(t, 1000*us)
	r.write(0, throttle(300*us), throttle(300*us), throttle(300*us), throttle(300*us), throttle(300*us))
	if n := len(r.flight); n != 3 {
		t.Fatalf("forwarded %d THROTTLEs of 300 ns under a 1000 ns budget, want 3", n)
	}
	if s := r.b.Stats(); s.InFlightNs != 900*us || s.Stalls == 0 {
		t.Fatalf("stats %+v, want 900 ns in flight and a stall", s)
	}
	// Each completion makes room for one more.
	r.complete(0)
	if n := len(r.flight); n != 3 {
		t.Fatalf("after a completion %d in flight, want 3", n)
	}
	for r.complete(0) {
	}
	if r.put[0] != 5 || r.chans[0].Snapshot().Commands != 5 {
		t.Fatalf("completed %d of 5", r.chans[0].Snapshot().Commands)
	}
	if s := r.b.Stats(); s.InFlightNs != 0 {
		t.Fatalf("%d ns in flight with nothing left", s.InFlightNs)
	}
}

func TestBudgetAlwaysLetsOneCommandGo(t *testing.T) {
	r := newVMRig(t, 1000*us)
	r.write(0, throttle(50_000*us), throttle(10*us))
	if len(r.flight) != 1 || r.flight[0].cmd.DurationNs != 50_000*us {
		t.Fatalf("forwarded %+v, want the long THROTTLE alone", r.flight)
	}
	r.complete(0)
	if len(r.flight) != 1 || r.flight[0].cmd.DurationNs != 10*us {
		t.Fatalf("forwarded %+v after the long one, want the short one", r.flight)
	}
}

func TestBudgetSharedByChannels(t *testing.T) {
	r := newVMRig(t, 1000*us)
	r.write(0, throttle(800*us))
	r.write(1, throttle(800*us), throttle(100*us))
	if r.inFlight(0) != 1 || r.inFlight(1) != 0 {
		t.Fatalf("in flight %d and %d, want channel 1 to wait for room", r.inFlight(0), r.inFlight(1))
	}
	if !r.chans[1].Pending() {
		t.Fatal("channel 1's records are not pending")
	}
	// Channel 0's completion forwards channel 1's records: no doorbell.
	r.complete(0)
	if r.inFlight(1) != 2 {
		t.Fatalf("after channel 0 completed, channel 1 has %d in flight, want 2", r.inFlight(1))
	}
}

// TestBudgetStallTickets: a channel that stops for room takes a ticket
// (Stalled) after those that stopped before it, keeps its first while it
// waits (a doorbell meanwhile takes no new one), and gives it up when it
// reserves again.
func TestBudgetStallTickets(t *testing.T) {
	r := newVMRig(t, 1000*us)
	r.write(0, throttle(800*us))
	if s := r.chans[0].Stalled(); s != 0 {
		t.Fatalf("a channel that forwarded holds ticket %d", s)
	}
	r.write(1, throttle(800*us))
	t1 := r.chans[1].Stalled()
	r.write(0, throttle(800*us))
	t0 := r.chans[0].Stalled()
	if t1 == 0 || t0 <= t1 {
		t.Fatalf("tickets %d (channel 1, stopped first) and %d (channel 0), want 0 < channel 1's < channel 0's", t1, t0)
	}
	r.chans[1].Poll() // still no room
	if s := r.chans[1].Stalled(); s != t1 {
		t.Fatalf("a doorbell while waiting moved channel 1's ticket %d to %d", t1, s)
	}
	r.complete(0) // room for one: channel 1 waited longest
	if r.inFlight(1) != 1 || r.chans[1].Stalled() != 0 {
		t.Fatalf("channel 1 has %d in flight and ticket %d, want 1 and none", r.inFlight(1), r.chans[1].Stalled())
	}
	if s := r.chans[0].Stalled(); s != t0 {
		t.Fatalf("channel 0, still waiting, holds ticket %d, want %d", s, t0)
	}
	// A reset drops what waited: nothing waits for room any more.
	r.region.Store32(r.layout.ChannelOff(0)+abi.ChReset, 1)
	r.chans[0].Poll()
	if s := r.chans[0].Stalled(); s != 0 {
		t.Fatalf("channel 0 holds ticket %d after a reset dropped what waited", s)
	}

	// A channel that fails forwards nothing until its reset: its ticket
	// goes, or every release would poll it first.
	r = newVMRig(t, 1000*us)
	r.write(0, throttle(800*us), throttle(800*us))
	if r.chans[0].Stalled() == 0 {
		t.Fatal("the second command did not wait for room")
	}
	f := r.flight[0]
	r.flight = r.flight[1:]
	r.chans[0].Complete(Completion{Index: uint32(f.tag), Op: f.cmd.Op, Code: abi.ErrDevice})
	if s := r.chans[0].Stalled(); s != 0 || r.inFlight(0) != 0 {
		t.Fatalf("a failed channel holds ticket %d with %d in flight, want none and none", s, r.inFlight(0))
	}
}

func TestBudgetLimitChanges(t *testing.T) {
	r := newVMRig(t, 1000*us)
	r.write(0, throttle(500*us), throttle(500*us), throttle(500*us), throttle(500*us))
	if len(r.flight) != 2 {
		t.Fatalf("forwarded %d, want 2", len(r.flight))
	}
	r.b.SetLimit(2000 * us) // a higher limit forwards what waited
	r.collect()
	if len(r.flight) != 4 {
		t.Fatalf("after raising the limit %d in flight, want 4", len(r.flight))
	}
	r.b.SetLimit(500 * us) // a lower one takes nothing back
	r.lowered = true
	r.write(1, throttle(1*us))
	if r.inFlight(1) != 0 || len(r.flight) != 4 {
		t.Fatalf("after lowering the limit %d in flight, channel 1 %d", len(r.flight), r.inFlight(1))
	}
	r.b.SetLimit(0) // none: everything goes
	r.collect()
	if r.inFlight(1) != 1 {
		t.Fatal("without a limit channel 1's record waits")
	}
}

func TestBudgetRefundsRefusedRecords(t *testing.T) {
	r := newVMRig(t, 1000*us)
	r.gpu.refuse = abi.ErrShutdown
	r.write(0, throttle(300*us), throttle(300*us))
	r.gpu.refuse = nil
	if s := r.b.Stats(); s.InFlightNs != 0 {
		t.Fatalf("%d ns in flight after the backend refused everything", s.InFlightNs)
	}
	r.write(1, throttle(900*us))
	if r.inFlight(1) != 1 {
		t.Fatal("the other channel cannot use the refunded room")
	}
}

// TestBudgetRandomized drives two channels with random THROTTLEs and random
// completions; check holds after every step, and everything completes.
func TestBudgetRandomized(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for range 20 {
		r := newVMRig(t, 1+rng.Int64N(5000*us))
		var written int
		for step := 0; step < 2000; step++ {
			ch := rng.IntN(2)
			if rng.IntN(3) == 0 && r.put[ch]-uint32(r.chans[ch].Snapshot().Commands) < 60 {
				r.write(ch, throttle(1+rng.Uint64N(3000*us)))
				written++
			} else {
				r.complete(ch)
			}
		}
		for r.complete(0) || r.complete(1) {
		}
		done := r.chans[0].Snapshot().Commands + r.chans[1].Snapshot().Commands
		if int(done) != written {
			t.Fatalf("completed %d of %d", done, written)
		}
	}
}

func TestBudgetEstimate(t *testing.T) {
	b := NewBudget(10_000_000)
	launch := &abi.Command{Op: abi.OpLaunch}
	if c := b.Cost(launch); c != 10_000_000 {
		t.Fatalf("an unknown kernel costs %d, want the whole limit", c)
	}
	if c := b.Cost(&abi.Command{Op: abi.OpNop}); c != ControlCostNs {
		t.Fatalf("a NOP costs %d", c)
	}
	if c := b.Cost(&abi.Command{Op: abi.OpThrottle, DurationNs: 12345}); c != 12345 {
		t.Fatalf("a THROTTLE costs %d, want its duration", c)
	}
	b.measured(abi.OpLaunch, 100_000)
	if c := b.Cost(launch); c != 100_000 {
		t.Fatalf("after one 100 µs kernel a kernel costs %d", c)
	}
	// Alternating short and long kernels: the estimate stays near the long.
	const long, short = 1_000_000, 1_000
	for range 100 {
		b.measured(abi.OpLaunch, long)
		b.measured(abi.OpLaunch, short)
		if c := b.Cost(launch); c < long*(EstimateFall-1)/EstimateFall {
			t.Fatalf("alternating: a kernel costs %d, want at least 7/8 of %d", c, long)
		}
	}
	// Many short ones lower it, but not below the period's peak / PeakRatio.
	for range 1000 {
		b.measured(abi.OpLaunch, short)
		b.measured(abi.OpNop, 1) // not kernels: not measured
	}
	if c := b.Cost(launch); c != long/PeakRatio {
		t.Fatalf("after many short kernels a kernel costs %d, want the peak's floor %d", c, long/PeakRatio)
	}
	b.Roll()
	if c := b.Cost(launch); c != long/PeakRatio {
		t.Fatalf("a period later a kernel costs %d, want the last period's floor %d", c, long/PeakRatio)
	}
	b.Roll()
	if c := b.Cost(launch); c < short || c > short+EstimateFall {
		t.Fatalf("two periods later a kernel costs %d, want %d", c, short)
	}
}

// TestBudgetUnmeasured: Unmeasured counts the work commands in flight
// forwarded before any was measured (their cost estimates nothing), not
// ones that waited for room or that the backend refused, and none once a
// work command was measured.
func TestBudgetUnmeasured(t *testing.T) {
	memset := abi.Command{Op: abi.OpMemset, Handle: 1, Length: 4096}
	alloc := abi.Command{Op: abi.OpAlloc, Handle: 2, Size: 4096}
	t.Run("limit", func(t *testing.T) {
		r := newVMRig(t, 1000*us)
		r.write(0, memset, memset) // the first goes alone, costing the limit
		if n, u := len(r.flight), r.b.Unmeasured(); n != 1 || u != 1 {
			t.Fatalf("%d in flight, %d unmeasured; want 1 and 1 (the second waits for room)", n, u)
		}
		r.complete(0) // BusyNs 0: nothing measured; the second goes
		if n, u := len(r.flight), r.b.Unmeasured(); n != 1 || u != 1 {
			t.Fatalf("%d in flight, %d unmeasured; want 1 and 1", n, u)
		}
		r.complete(0)
		if u := r.b.Unmeasured(); u != 0 {
			t.Fatalf("%d unmeasured with nothing in flight", u)
		}
		r.gpu.refuse = abi.ErrShutdown
		r.write(1, memset)
		r.gpu.refuse = nil
		if u := r.b.Unmeasured(); u != 0 {
			t.Fatalf("%d unmeasured after the backend refused the command", u)
		}
	})
	t.Run("none", func(t *testing.T) {
		r := newVMRig(t, 0)
		r.write(0, throttle(300*us), memset, alloc)
		r.write(1, memset)
		if n, u := len(r.flight), r.b.Unmeasured(); n != 4 || u != 3 {
			t.Fatalf("%d in flight, %d unmeasured; want 4 and 3 (a THROTTLE's cost is its length)", n, u)
		}
		if got := r.b.Cost(&memset); got != ControlCostNs {
			t.Fatalf("with no limit an unmeasured MEMSET costs %d, want %d", got, ControlCostNs)
		}
		// Channel 1's MEMSET ran 50 µs: from now on work commands are
		// estimated. (The rig's check prices what is in flight at today's
		// costs: the rest goes around it.)
		for _, s := range r.flight[3:] {
			r.chans[1].Complete(Completion{Index: uint32(s.tag), Op: abi.OpMemset, BusyNs: 50 * us})
		}
		rec := abi.EncodeCommand(memset)
		r.region.CopyIn(r.layout.RecordOff(1, r.put[1]), rec[:])
		r.put[1]++
		r.region.Store32(r.layout.ChannelOff(1)+abi.ChPut, r.put[1])
		r.chans[1].Poll()
		flight := append(r.flight[:3], r.gpu.take()...)
		if n, u := len(flight), r.b.Unmeasured(); n != 4 || u != 2 {
			t.Fatalf("%d in flight, %d unmeasured; want 4 and the 2 forwarded before the measurement", n, u)
		}
		for _, s := range flight {
			r.chans[s.ch].Complete(Completion{Index: uint32(s.tag), Op: s.cmd.Op, BusyNs: 50 * us})
		}
		if u, q := r.b.Unmeasured(), r.b.InFlight(); u != 0 || q != 0 {
			t.Fatalf("%d unmeasured, %d ns in flight with nothing in flight", u, q)
		}
	})
}
