package vm

import (
	"context"
	"errors"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/transport/process"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/backend/sim"
	"github.com/sluice-gpu/sluice/mediator/internal/channel"
)

// instantGPU completes every command inside Submit and notes when Submit
// ran: the moment of dispatch.
type instantGPU struct {
	mu       sync.Mutex
	complete func(backend.Completion)
	last     atomic.Int64 // monotonic ns of the last Submit
	closed   bool
}

func (g *instantGPU) Submit(ch int, cmd abi.Command, tag uint64) error {
	g.last.Store(nanotime())
	now := nanotime()
	g.complete(backend.Completion{Channel: ch, Tag: tag, Op: cmd.Op, Start: now, End: now + int64(cmd.DurationNs)})
	return nil
}

var epoch = time.Now()

func nanotime() int64 { return int64(time.Since(epoch)) }

func (g *instantGPU) closeVM() error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	return nil
}

func newTestVM(t testing.TB, gpu *instantGPU) (*VM, *sdk.Device) {
	t.Helper()
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 2, RingEntries: 64, SyscallSlots: 64})
	if err != nil {
		t.Fatal(err)
	}
	v, err := New(Config{Name: "t", ID: 1, Weight: 1, Layout: l, Limits: abi.DefaultLimits(),
		Socket: filepath.Join(t.TempDir(), "t.sock"), Epoch: 7}, backendOf{gpu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v, dial(t, v)
}

// dial joins v as a process guest.
func dial(t testing.TB, v *VM) *sdk.Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := process.Dial(ctx, v.Config().Socket, 0)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := sdk.Open(tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// backendOf adapts instantGPU to backend.Backend with a VM whose Close is
// its own.
type backendOf struct{ g *instantGPU }

func (b backendOf) Attach(spec backend.VMSpec) (backend.VM, error) {
	b.g.complete = spec.Complete
	return vmOf(b), nil
}
func (b backendOf) Clock() backend.Clock { return nil }
func (b backendOf) Close() error         { return nil }

type vmOf struct{ g *instantGPU }

func (v vmOf) Submit(ch int, cmd abi.Command, tag uint64) error { return v.g.Submit(ch, cmd, tag) }
func (v vmOf) Close() error                                     { return v.g.closeVM() }

func TestVMEndToEnd(t *testing.T) {
	gpu := &instantGPU{}
	v, dev := newTestVM(t, gpu)
	if dev.Epoch() != 7 || dev.Layout().Channels != 2 {
		t.Fatalf("header: epoch %d, %d channels", dev.Epoch(), dev.Layout().Channels)
	}
	ch, err := dev.Channel(1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	idx, err := ch.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: 500}, abi.Command{Op: abi.OpFence, Value: 9})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Wait(ctx, idx); err != nil {
		t.Fatal(err)
	}
	if ch.Fence() != 9 {
		t.Fatalf("fence %d", ch.Fence())
	}
	// Doorbells on the syscall and control vectors and beyond are counted,
	// not acted on.
	for _, vec := range []int{abi.SyscallVector(2), abi.ControlVector(2)} {
		if err := dev.Doorbell(vec); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for v.other.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st := v.Stats()
	if st.Total.Kernels != 1 || st.Total.Commands != 2 || st.Total.BusyNs != 500 || v.other.Load() != 2 {
		t.Fatalf("stats %+v, other doorbells %d", st.Total, v.other.Load())
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if !gpu.closed {
		t.Fatal("backend vm not closed")
	}
	if st := v.Stats(); st.Total.Commands != 2 {
		t.Fatalf("counters lost on close: %+v", st.Total)
	}
}

// BenchmarkDoorbellToDispatch measures, in process-guest mode, the time
// from a guest's doorbell (eventfd write) to the mediator handing the
// command to the backend, and the whole round trip until the guest sees
// get advance.
func BenchmarkDoorbellToDispatch(b *testing.B) {
	gpu := &instantGPU{}
	_, dev := newTestVM(b, gpu)
	ch, err := dev.Channel(0)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	dispatch := make([]time.Duration, 0, b.N)
	roundTrip := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := nanotime()
		idx, err := ch.Submit(ctx, abi.Command{Op: abi.OpNop})
		if err != nil {
			b.Fatal(err)
		}
		if err := ch.Wait(ctx, idx); err != nil {
			b.Fatal(err)
		}
		dispatch = append(dispatch, time.Duration(gpu.last.Load()-t0))
		roundTrip = append(roundTrip, time.Duration(nanotime()-t0))
	}
	b.StopTimer()
	report := func(name string, d []time.Duration) {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), name+"-p50-ns")
		b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds()), name+"-p99-ns")
	}
	report("dispatch", dispatch)
	report("roundtrip", roundTrip)
}

// TestMemoryQuota: the quota reaches the backend at Attach and on a change,
// Memory reports it with the use, and a backend that cannot enforce a quota
// is refused one.
func TestMemoryQuota(t *testing.T) {
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	cfg := func(name string, quota uint64) Config {
		return Config{Name: name, ID: 1, Weight: 1, Layout: l, Limits: abi.DefaultLimits(),
			Socket: filepath.Join(t.TempDir(), name+".sock"), MemoryQuota: quota}
	}
	if _, err := New(cfg("plain", 1<<20), backendOf{&instantGPU{}}); !errors.Is(err, ErrNoQuota) {
		t.Fatalf("a quota on a backend without one: %v, want ErrNoQuota", err)
	}
	v, err := New(cfg("none", 0), backendOf{&instantGPU{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.SetMemoryQuota(1); !errors.Is(err, ErrNoQuota) {
		t.Errorf("SetMemoryQuota on a backend without quotas: %v", err)
	}
	v.Close()

	be, err := sim.New(backend.Options{Clock: "virtual"})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	v, err = New(cfg("sim", 4096), be)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := dial(t, v).Channel(0)
	if err != nil {
		t.Fatal(err)
	}
	handle := uint32(0)
	alloc := func(n uint64) abi.ErrorCode {
		t.Helper()
		handle++
		return do(ctx, t, ch, abi.Command{Op: abi.OpAlloc, Handle: handle, Size: n})
	}
	if code := alloc(4097); code != abi.ErrNoMemory {
		t.Errorf("an ALLOC past the quota: %v", code)
	}
	if code := alloc(4096); code != abi.OK {
		t.Errorf("an ALLOC to the quota: %v", code)
	}
	if q, u := v.Memory(); q != 4096 || u != 4096 {
		t.Errorf("Memory() = %d, %d; want 4096, 4096", q, u)
	}
	if err := v.SetMemoryQuota(8192); err != nil {
		t.Fatal(err)
	}
	if code := alloc(4000); code != abi.OK {
		t.Errorf("an ALLOC under the raised quota: %v", code)
	}
	if q, u := v.Memory(); q != 8192 || u != 8096 {
		t.Errorf("Memory() = %d, %d; want 8192, 8096", q, u)
	}
}

// TestMaxCommand: the VM's longest command bounds its guest's THROTTLEs
// (ErrTooLong) and is the header's max_throttle_ns; a command that runs
// past it fails with ErrTimedOut and is counted; a change applies to the
// next records and to the header.
func TestMaxCommand(t *testing.T) {
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	be, err := sim.New(backend.Options{Clock: "virtual", Params: map[string]string{"copy_bw": "100M"}})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	v, err := New(Config{Name: "lim", ID: 1, Weight: 1, Layout: l, Limits: abi.Limits{MaxThrottleNs: 1e6, MaxAllocSize: 1 << 20},
		Socket: filepath.Join(t.TempDir(), "lim.sock")}, be)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev := dial(t, v)
	if got := dev.Header().Limits.MaxThrottleNs; got != 1e6 {
		t.Fatalf("the guest sees a longest throttle of %d, want 1e6", got)
	}
	ch, err := dev.Channel(0)
	if err != nil {
		t.Fatal(err)
	}
	do := func(c abi.Command) abi.ErrorCode {
		t.Helper()
		return do(ctx, t, ch, c)
	}
	throttle := func(ns uint64) abi.Command { return abi.Command{Op: abi.OpThrottle, DurationNs: ns} }
	if code := do(throttle(1e6)); code != abi.OK {
		t.Errorf("a THROTTLE at the limit: %v", code)
	}
	if code := do(throttle(1e6 + 1)); code != abi.ErrTooLong {
		t.Errorf("a THROTTLE past the limit: %v, want %v", code, abi.ErrTooLong)
	}
	if err := v.SetMaxCommand(0); !errors.Is(err, ErrBadLimit) {
		t.Errorf("a longest command of 0: %v", err)
	}
	if err := v.SetMaxCommand(2e6); err != nil {
		t.Fatal(err)
	}
	if got := v.region.Load64(abi.HdrMaxThrottleNs); got != 2e6 {
		t.Errorf("the header's max_throttle_ns %d after the change, want 2e6", got)
	}
	if code := do(throttle(1.5e6)); code != abi.OK {
		t.Errorf("a THROTTLE under the raised limit: %v", code)
	}
	// 1 MiB at 100 MB/s: about 10 ms, past 2 ms and a quarter.
	for h := uint32(1); h <= 2; h++ {
		if code := do(abi.Command{Op: abi.OpAlloc, Handle: h, Size: 1 << 20}); code != abi.OK {
			t.Fatalf("alloc: %v", code)
		}
	}
	if code := do(abi.Command{Op: abi.OpCopy, Dir: abi.CopyDeviceToDevice, Handle: 1, SrcHandle: 2, Length: 1 << 20}); code != abi.ErrTimedOut {
		t.Errorf("a COPY past the limit: %v, want %v", code, abi.ErrTimedOut)
	}
	if ns, n := v.MaxCommand(); ns != 2e6 || n != 1 {
		t.Errorf("MaxCommand() = %d, %d; want 2e6, 1", ns, n)
	}
}

// do submits c on ch and waits for it: its error code, the channel reset
// after a failure so that it goes on.
func do(ctx context.Context, t *testing.T, ch *sdk.Channel, c abi.Command) abi.ErrorCode {
	t.Helper()
	idx, err := ch.Submit(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Wait(ctx, idx); err == nil {
		return abi.OK
	}
	code, _ := ch.Err()
	if err := ch.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	return code
}

// TestBudget: Budget reports the in-flight budget the VM's channels share:
// unbounded until one is set, its bound, nothing in flight once the
// commands completed, and an estimate only after a work command was
// measured.
func TestBudget(t *testing.T) {
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 2, RingEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	be, err := sim.New(backend.Options{Clock: "virtual", Params: map[string]string{"memset_ns": "40000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	v, err := New(Config{Name: "b", ID: 1, Weight: 1, Layout: l, Limits: abi.DefaultLimits(),
		Socket: filepath.Join(t.TempDir(), "b.sock")}, be)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if got := v.Budget(); got != (channel.BudgetStats{}) {
		t.Errorf("a new VM's budget %+v, want none set and nothing measured", got)
	}
	if v.Channels()[0].Budget() != v.Channels()[1].Budget() {
		t.Fatal("the VM's channels do not share one budget")
	}
	v.Channels()[1].Budget().SetLimit(5e6)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := dial(t, v).Channel(1)
	if err != nil {
		t.Fatal(err)
	}
	if code := do(ctx, t, ch, abi.Command{Op: abi.OpThrottle, DurationNs: 1e6}); code != abi.OK {
		t.Fatalf("throttle: %v", code)
	}
	if got := drainedBudget(v); got.LimitNs != 5e6 || got.InFlightNs != 0 || got.EstimateNs != 0 {
		t.Errorf("after a THROTTLE: %+v, want limit 5ms, nothing in flight, no estimate (a THROTTLE is not measured)", got)
	}
	for _, c := range []abi.Command{{Op: abi.OpAlloc, Handle: 1, Size: 4096}, {Op: abi.OpMemset, Handle: 1, Length: 4096}} {
		if code := do(ctx, t, ch, c); code != abi.OK {
			t.Fatalf("%v: %v", c.Op, code)
		}
	}
	if got := drainedBudget(v); got.InFlightNs != 0 || got.EstimateNs < 40000 || got.EstimateNs > 50000 {
		t.Errorf("after a MEMSET of about 40µs: %+v, want nothing in flight and an estimate of its time", got)
	}
}

// drainedBudget is v's budget once nothing is in flight, or after 2 s: the
// guest sees a completion published before the budget is given its cost
// back (the refund runs after the channel's lock: it may forward the VM's
// other channels).
func drainedBudget(v *VM) channel.BudgetStats {
	got := v.Budget()
	for end := time.Now().Add(2 * time.Second); got.InFlightNs != 0 && time.Now().Before(end); got = v.Budget() {
		time.Sleep(time.Millisecond)
	}
	return got
}

// TestHeaderRewrittenOnJoin: a header a guest corrupted is written again
// before the next guest joins, with the limits in force, so that guest
// joins; and so are the channels' host lines (the host otherwise writes
// only the fields that change).
func TestHeaderRewrittenOnJoin(t *testing.T) {
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	be, err := sim.New(backend.Options{Clock: "virtual"})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	v, err := New(Config{Name: "hdr", ID: 1, Weight: 1, Layout: l, Limits: abi.DefaultLimits(),
		Socket: filepath.Join(t.TempDir(), "hdr.sock")}, be)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.SetMaxCommand(3e6); err != nil {
		t.Fatal(err)
	}
	v.Heartbeat(12345)
	junk := make([]byte, abi.HeaderSize)
	for i := range junk {
		junk[i] = 0xa5
	}
	v.region.CopyIn(0, junk)
	v.region.Store32(l.ChannelOff(0)+abi.ChGet, 0xa5a5)
	dev := dial(t, v) // sdk.Open refuses a header it cannot read
	if h := dev.Header(); h.Limits.MaxThrottleNs != 3e6 || h.Heartbeat != 12345 || h.Features&abi.FeatureWake == 0 {
		t.Errorf("header after the join: max throttle %d, heartbeat %d, features %#x; want 3e6, 12345, wake", h.Limits.MaxThrottleNs, h.Heartbeat, h.Features)
	}
	if g := v.region.Load32(l.ChannelOff(0) + abi.ChGet); g != 0 {
		t.Errorf("get after the join: %#x, want 0", g)
	}
}
