package vm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// queueGPU keeps what it is given until the test completes it.
type queueGPU struct {
	mu       sync.Mutex
	complete func(backend.Completion)
	queue    []backend.Completion
}

func (g *queueGPU) Attach(spec backend.VMSpec) (backend.VM, error) {
	g.complete = spec.Complete
	return g, nil
}
func (g *queueGPU) Clock() backend.Clock { return nil }
func (g *queueGPU) Close() error         { return nil }

func (g *queueGPU) Submit(ch int, cmd abi.Command, tag uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queue = append(g.queue, backend.Completion{Channel: ch, Tag: tag, Op: cmd.Op, End: int64(cmd.DurationNs)})
	return nil
}

// completeOne completes the oldest command it holds; false if none.
func (g *queueGPU) completeOne() bool {
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.mu.Unlock()
		return false
	}
	c := g.queue[0]
	g.queue = g.queue[1:]
	g.mu.Unlock()
	g.complete(c)
	return true
}

// A guest connected across a hand-over keeps its connection: of three
// kernels, one completed before the hand-over and two were in flight; the
// successor runs those two, the guest's wait ends, and the two endpoints'
// counts add up to three kernels, none counted twice.
func TestExportAdopt(t *testing.T) {
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Name: "h", ID: 1, Weight: 1, Layout: l, Limits: abi.DefaultLimits(), Socket: t.TempDir() + "/h.sock", Epoch: 9}
	old := &queueGPU{}
	v, err := New(cfg, old)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close() // after Export: it only unmaps its region
	dev, ch, ctx := guestChannel(t, v)
	k := kernel1us
	last, err := ch.Submit(ctx, k, k, k)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "three kernels forwarded", func() bool { return v.Stats().Channels[0].InFlight == 3 })
	if !old.completeOne() {
		t.Fatal("nothing to complete")
	}
	h, err := v.Export(time.Millisecond)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	for old.completeOne() { // the old backend finishing late: dropped
	}
	if got := v.Stats().Total; got.Kernels != 1 {
		t.Fatalf("the old endpoint counted %d kernels, want the 1 completed before the hand-over", got.Kernels)
	}

	cfg.Adopt = &h
	succ, err := New(cfg, backendOf{&instantGPU{}})
	if err != nil {
		t.Fatalf("adopting: %v", err)
	}
	defer succ.Close()
	if err := ch.Wait(ctx, last); err != nil {
		t.Fatalf("the guest's wait across the hand-over: %v", err)
	}
	if got := succ.Stats().Total; got.Kernels != 2 || got.Errors != 0 {
		t.Fatalf("the successor counted %+v, want the 2 kernels in flight at the hand-over", got)
	}
	if peers := succ.Peers(); len(peers) != 1 {
		t.Fatalf("successor peers %v, want the guest", peers)
	}
	if !succ.Created().Equal(v.Created()) {
		t.Fatalf("created %v, want the predecessor's %v", succ.Created(), v.Created())
	}
	// The guest goes on as if nothing happened.
	idx, err := ch.Submit(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Wait(ctx, idx); err != nil {
		t.Fatal(err)
	}
	if dev.Epoch() != 9 {
		t.Fatalf("epoch %d after the hand-over, want 9", dev.Epoch())
	}
}

// A memfd that is not the region's size is refused.
func TestAdoptRefusesWrongMemfd(t *testing.T) {
	v, _ := newTestVM(t, &instantGPU{})
	cfg := v.Config()
	small := cfg.Layout
	small.RegionSize /= 2
	if err := adoptMemfd(v.memfd, small.RegionSize); err == nil {
		t.Fatal("a memfd of the wrong size was adopted")
	}
	if err := adoptMemfd(0, cfg.Layout.RegionSize); err == nil {
		t.Fatal("stdin was adopted as a memfd")
	}
	if err := adoptMemfd(v.memfd, cfg.Layout.RegionSize); err != nil {
		t.Fatalf("the region's own memfd: %v", err)
	}
}

// eventually waits, up to a deadlock guard, for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting: %s", what)
		}
	}
}

// kernel1us is a THROTTLE of a microsecond.
var kernel1us = abi.Command{Op: abi.OpThrottle, DurationNs: 1000}

// guestChannel joins v as a guest and returns its device, its channel 0
// and a context that bounds the test's waits.
func guestChannel(t *testing.T, v *VM) (*sdk.Device, *sdk.Channel, context.Context) {
	t.Helper()
	dev := dial(t, v)
	ch, err := dev.Channel(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return dev, ch, ctx
}
