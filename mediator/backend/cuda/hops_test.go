package cuda

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// loop attaches a VM whose callback submits the next THROTTLE of ns on its
// channel until n have completed (a depth-1 loop, as a guest waiting on each
// of its commands), runs it and returns its completions.
func (r *rig) loop(n int, ns uint64, slow time.Duration) []backend.Completion {
	r.t.Helper()
	var vm *cudaVM
	got := make(chan backend.Completion, n)
	var count atomic.Int64
	v, err := r.b.Attach(backend.VMSpec{ID: 1, Name: "loop", Channels: 1, Complete: func(c backend.Completion) {
		got <- c
		time.Sleep(slow)
		if k := count.Add(1); k < int64(n) {
			if err := vm.Submit(0, abi.Command{Op: abi.OpThrottle, DurationNs: ns}, uint64(k)); err != nil {
				r.t.Errorf("submit from the callback: %v", err)
			}
		}
	}})
	if err != nil {
		r.t.Fatal(err)
	}
	vm = v.(*cudaVM)
	r.submit(vm, 0, abi.Command{Op: abi.OpThrottle, DurationNs: ns}, 0)
	return wait(r.t, got, n)
}

// A depth-1 loop is delivered by the completer itself (inline), in order,
// with its kernels' time billed.
func TestInlineDeliveryOfADepthOneLoop(t *testing.T) {
	r := newRig(t, nil)
	start := r.b.now()
	got := r.loop(200, 1500, 0)
	wall := r.b.now() - start
	var billed int64
	for i, c := range got {
		if c.Tag != uint64(i) || c.Code != abi.OK {
			t.Fatalf("completion %d: tag %d code %v", i, c.Tag, c.Code)
		}
		if c.Busy() < 0 || c.End < c.Start {
			t.Errorf("completion %d billed %d ns (%d to %d)", i, c.Busy(), c.Start, c.End)
		}
		billed += c.Busy()
	}
	// The fake driver's kernels take no wall time: the sweeps sample them
	// running now and then, and the bills add up to no more than the loop.
	if billed > wall {
		t.Errorf("the loop's bills add up to %d ns, more than its %d ns", billed, wall)
	}
	// The first delivery at least: nothing else was outstanding and no
	// callback had been slow yet.
	if n := r.b.inlined.Load(); n == 0 {
		t.Fatal("no completion was delivered inline")
	}
}

// Callbacks slow again and again send the next completions to the
// deliverer: the third slow one in a row.
func TestSlowCallbacksTurnInlineOff(t *testing.T) {
	r := newRig(t, nil)
	got := r.loop(6, 1500, time.Millisecond)
	if len(got) != 6 {
		t.Fatalf("%d completions", len(got))
	}
	if n := r.b.inlined.Load(); n != 3 {
		t.Fatalf("%d completions delivered inline, want the first three", n)
	}
}

// One slow callback now and then (a preempted thread) leaves inline
// delivery on; more than about one in 32 turns it off.
func TestInlineScore(t *testing.T) {
	b := &Backend{}
	for k := range 10_000 {
		took := int64(1_000)
		if k%40 == 0 {
			took = 2 * inlineMax
		}
		b.judgeInline(took)
		if b.slowInline != 0 {
			t.Fatalf("backoff after callback %d with one in 40 slow", k)
		}
	}
	for k := range 1_000 {
		took := int64(1_000)
		if k%16 == 0 {
			took = 2 * inlineMax
		}
		if b.judgeInline(took); b.slowInline != 0 {
			return
		}
	}
	t.Fatal("no backoff with one in 16 callbacks slow")
}

// Inline delivery is refused while other commands are outstanding or the
// deliverer has work: a start could go unseen, or a channel's order break.
func TestInlineRefused(t *testing.T) {
	b := &Backend{ho: newHandoff()}
	out := []delivery{{}}
	b.outstanding.Store(2)
	if b.inline(out) {
		t.Error("inline with another command outstanding")
	}
	b.outstanding.Store(1)
	b.ho.push(make([]delivery, 1))
	if b.inline(out) {
		t.Error("inline with the deliverer holding completions")
	}
	b.ho.taken.Store(1)
	b.slowInline = 2
	if b.inline(out) || b.slowInline != 1 {
		t.Errorf("inline during the backoff (left %d)", b.slowInline)
	}
}

// The hop diagnostic writes every hop of a depth-1 loop on the fake
// driver, whose kernels take exactly their length on its timer; its clock
// sync kernel never answers, so the hops that need the GPU's clock are
// left out and the report says why.
func TestHopReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hops.json")
	t.Setenv(HopsEnv, path)
	r := newRig(t, nil)
	const n = 50
	r.loop(n, 1500, 0)
	if err := r.b.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep HopReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.GPUClock == nil || rep.GPUClock.OK || rep.GPUClock.Error == "" {
		t.Errorf("gpu clock %+v: want not related, with the reason", rep.GPUClock)
	}
	hops := map[string]HopStat{}
	for _, h := range rep.Hops {
		hops[h.Hop] = h
	}
	want := map[string]int{
		"submit_to_worker_read": n, "kernel": n, "end_seen_to_callback": n, "callback": n,
		"callback_to_next_submit": n - 1, "submit_to_submit": n - 1, "submit_to_end_seen": n,
		"launched_to_kernel_start": 0, "kernel_end_to_end_seen": 0, "kernel_start_to_start_seen": 0,
		"bill_less_kernel": n, "kernel_gap": 0, // a depth-1 loop: no kernel queued behind another
	}
	for name, count := range want {
		h, ok := hops[name]
		if !ok || h.N != count {
			t.Errorf("hop %s: %+v, want %d samples", name, h, count)
		}
	}
	// The fake's kernels end inside the launch call: the completer may see
	// the end before the worker notes the call's return.
	for _, name := range []string{"worker_read_to_launched", "launched_to_end_seen_less_kernel"} {
		if h, ok := hops[name]; !ok || h.N > n {
			t.Errorf("hop %s: %+v, want %d samples at most", name, h, n)
		}
	}
	if k := hops["kernel"]; k.P10 != 1500 || k.P99 != 1500 || k.Mean != 1500 {
		t.Errorf("kernel hop %+v, want 1500 ns throughout", k)
	}
	if h := hops["sweep_after_delivery"]; h.N == 0 || h.P10 < 0 {
		t.Errorf("sweep_after_delivery hop %+v, want the intervals after the sweeps that delivered", h)
	}
	// The fake's kernels end inside the launch call, mostly between two
	// sweeps, billed nothing: the hop is the bill less the kernel, never
	// below the kernel's negative.
	if h := hops["bill_less_kernel"]; h.P10 != -1500 || h.Mean < -1500 || h.Mean > h.P99 {
		t.Errorf("bill_less_kernel hop %+v, want -1500 ns at p10 and a mean at or above it", h)
	}
	for _, name := range []string{"submit_to_worker_read", "callback", "submit_to_submit"} {
		if h := hops[name]; h.P10 < 0 || h.P50 > h.P90 {
			t.Errorf("hop %s: %+v", name, h)
		}
	}
}

// The host's side of the clock sync finds a GPU clock's offset within its
// stated uncertainty: here the GPU is a goroutine whose clock is the
// host's plus 12345 ms.
func TestClockRounds(t *testing.T) {
	const offset = 12_345_000_000
	mc := newMonoClock()
	var flag, out, seen uint64
	go func() {
		for i := uint64(1); i <= clockSyncRounds; i++ {
			for atomic.LoadUint64(&flag) < i {
				runtime.Gosched() // the test may share its cores
			}
			atomic.StoreUint64(&out, uint64(mc.now()+offset))
			atomic.StoreUint64(&seen, i)
		}
	}()
	c, err := clockRounds(&flag, &out, &seen, mc)
	if err != nil {
		t.Fatal(err)
	}
	if !c.OK || c.Rounds != clockSyncRounds {
		t.Fatalf("clock %+v", c)
	}
	if d := c.OffsetNs - offset; d < -c.UncertaintyNs || d > c.UncertaintyNs {
		t.Fatalf("offset %d, off by %d: more than the uncertainty %d", c.OffsetNs, d, c.UncertaintyNs)
	}
}

// The monotonic clock agrees with CLOCK_MONOTONIC read directly.
func TestMonoClock(t *testing.T) {
	mc := newMonoClock()
	a := mc.now()
	b := newMonoClock().now()
	if b < a || b-a > int64(time.Second) {
		t.Fatalf("two readings %d, %d", a, b)
	}
}

// A StreamMarkers native run puts two stream memops, the stream's start
// and end markers, around each kernel, which writes its own markers
// elsewhere; with the hop diagnostic on it writes its report beside.
func TestNativeStreamMarkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hops.json")
	t.Setenv(HopsEnv, path)
	d := newFake()
	p := NativePlan{StreamMarkers: true, VMs: []NativeVM{{Name: "a", Streams: 1, Depth: 1, KernelNs: 5000, Kernels: 20}}}
	res, err := runNativeFake(t, d, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kernels != 20 || !res.StreamMarkers {
		t.Fatalf("result %+v", res)
	}
	if n := d.counted("WriteValue64"); n != 40 {
		t.Errorf("%d stream memops, want 2 a kernel", n)
	}
	for _, l := range d.launched() {
		if l.name != throttleName {
			continue
		}
		if start, end := le.Uint64(l.args[32:]), le.Uint64(l.args[40:]); end != start+8 {
			t.Errorf("kernel markers %#x, %#x: want the scratch pair", start, end)
		}
	}
	raw, err := os.ReadFile(path + ".native.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep HopReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	for _, h := range rep.Hops {
		if h.Hop == "kernel" && (h.N != 20 || h.P50 != 5000) {
			t.Errorf("kernel hop %+v, want 20 of 5000 ns", h)
		}
		if h.Hop == "launch_to_launch" && h.N != 19 {
			t.Errorf("launch_to_launch hop %+v, want 19", h)
		}
	}
}

// A command submitted while the completer is parked wakes it (Submit
// signals only a parked completer): each of several commands, one at a
// time, each after the completer parked, completes.
func TestSubmitWakesAParkedCompleter(t *testing.T) {
	r := newRig(t, nil)
	vm := r.attach(1, 1, nil)
	for k := range 5 {
		deadline := time.Now().Add(10 * time.Second)
		for !r.b.parked.Load() {
			if time.Now().After(deadline) {
				t.Fatalf("command %d: the completer did not park within 10s of the last completion", k)
			}
			time.Sleep(time.Millisecond)
		}
		r.submit(vm, 0, abi.Command{Op: abi.OpNop}, uint64(k))
		if c := wait(t, r.done, 1)[0]; c.Tag != uint64(k) || c.Code != abi.OK {
			t.Fatalf("command %d completed as %+v", k, c)
		}
	}
}
