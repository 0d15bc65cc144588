package workload_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/sdk/sdktest"
	"github.com/sluice-gpu/sluice/guest-agent/workload"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // deadlock guard only
	t.Cleanup(cancel)
	return ctx
}

func openChannel(t *testing.T, cfg sdktest.Config, i int) (*sdktest.Host, *sdk.Channel) {
	t.Helper()
	h, d := sdktest.Open(t, cfg)
	c, err := d.Channel(i)
	if err != nil {
		t.Fatal(err)
	}
	return h, c
}

func TestSummarize(t *testing.T) {
	var hundred []time.Duration
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, time.Duration(i))
	}
	tests := []struct {
		name    string
		samples []time.Duration
		want    workload.Summary
	}{
		{"none", nil, workload.Summary{}},
		{"one", []time.Duration{7}, workload.Summary{P50: 7, P90: 7, P99: 7, Max: 7, Mean: 7}},
		{"two", []time.Duration{10, 2}, workload.Summary{P50: 2, P90: 10, P99: 10, Max: 10, Mean: 6}},
		{"hundred", hundred, workload.Summary{P50: 50, P90: 90, P99: 99, Max: 100, Mean: 50}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := workload.Summarize(tt.samples); got != tt.want {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func checkOrdered(t *testing.T, s workload.Summary, floor int64) {
	t.Helper()
	if s.P50 < floor || s.P90 < s.P50 || s.P99 < s.P90 || s.Max < s.P99 || s.Mean < floor || s.Mean > s.Max {
		t.Errorf("summary %+v: not ordered or below %d ns", s, floor)
	}
}

func TestThrottleKernelCount(t *testing.T) {
	_, c := openChannel(t, sdktest.Config{}, 1)
	cfg := workload.ThrottleConfig{Kernel: 20 * time.Microsecond, Sleep: 5 * time.Microsecond, Kernels: 25}
	res, err := workload.Throttle(testCtx(t), c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kernels != 25 || res.Errors != 0 || res.Channel != 1 || res.SubmittedGPUNs != 25*20000 {
		t.Errorf("result %+v", res)
	}
	if res.KernelUs != 20 || res.SleepUs != 5 || res.Workload != "throttle" {
		t.Errorf("result %+v does not echo its config", res)
	}
	// The fake host sleeps at least the kernel's length.
	checkOrdered(t, res.TurnaroundNs, 20000)
	if res.ElapsedNs < 25*20000 || c.Completed() != 25 {
		t.Errorf("elapsed %d ns for 25 kernels of 20 µs, host completed %d", res.ElapsedNs, c.Completed())
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"workload", "channel", "kernel_us", "sleep_us", "kernels", "errors", "elapsed_ns", "turnaround_ns", "submitted_gpu_ns"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("JSON result lacks %q: %s", k, b)
		}
	}
}

func TestThrottleDuration(t *testing.T) {
	_, c := openChannel(t, sdktest.Config{}, 0)
	cfg := workload.ThrottleConfig{Kernel: 100 * time.Microsecond, Duration: 20 * time.Millisecond}
	res, err := workload.Throttle(testCtx(t), c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kernels < 1 || res.ElapsedNs < int64(20*time.Millisecond) {
		t.Errorf("%d kernels in %d ns", res.Kernels, res.ElapsedNs)
	}
	if uint64(res.Kernels) != c.Completed() {
		t.Errorf("%d kernels measured, host completed %d", res.Kernels, c.Completed())
	}
}

// everyThird fails every third record of every channel.
func everyThird(ch, idx uint32, cmd abi.Command) abi.ErrorCode {
	if idx%3 == 2 {
		return abi.ErrDevice
	}
	return sdktest.DefaultHandler(ch, idx, cmd)
}

func TestThrottleErrors(t *testing.T) {
	t.Run("tolerated", func(t *testing.T) {
		_, c := openChannel(t, sdktest.Config{Handler: everyThird}, 0)
		cfg := workload.ThrottleConfig{Kernel: time.Microsecond, Kernels: 10, MaxErrors: 100}
		res, err := workload.Throttle(testCtx(t), c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Kernels != 10 || res.Errors != 4 {
			t.Errorf("%d kernels %d errors, want 10 4", res.Kernels, res.Errors)
		}
	})
	t.Run("fatal", func(t *testing.T) {
		_, c := openChannel(t, sdktest.Config{Handler: everyThird}, 0)
		cfg := workload.ThrottleConfig{Kernel: time.Microsecond, Kernels: 10}
		res, err := workload.Throttle(testCtx(t), c, cfg)
		if abi.CodeOf(err) != abi.ErrDevice {
			t.Fatalf("error %v, want device error", err)
		}
		if res.Kernels != 2 || res.Errors != 1 {
			t.Errorf("%d kernels %d errors, want 2 1", res.Kernels, res.Errors)
		}
	})
	t.Run("too long", func(t *testing.T) {
		_, c := openChannel(t, sdktest.Config{Limits: abi.Limits{MaxThrottleNs: 1000, MaxAllocSize: 1}}, 0)
		_, err := workload.Throttle(testCtx(t), c, workload.ThrottleConfig{Kernel: time.Millisecond, Kernels: 1})
		if !errors.Is(err, abi.ErrTooLong) {
			t.Fatalf("error %v, want too long", err)
		}
	})
}

func TestThrottleValidate(t *testing.T) {
	bad := []workload.ThrottleConfig{
		{Kernels: 1},
		{Kernel: time.Microsecond},
		{Kernel: time.Microsecond, Kernels: 1, Sleep: -1},
		{Kernel: time.Microsecond, Duration: -time.Second},
	}
	_, c := openChannel(t, sdktest.Config{}, 0)
	for _, cfg := range bad {
		if _, err := workload.Throttle(testCtx(t), c, cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	if c.Put() != 0 {
		t.Errorf("invalid configs submitted %d records", c.Put())
	}
}

func TestThrottleCancelled(t *testing.T) {
	h, c := openChannel(t, sdktest.Config{}, 0)
	h.Pause()
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Millisecond)
	defer cancel()
	res, err := workload.Throttle(ctx, c, workload.ThrottleConfig{Kernel: time.Microsecond, Kernels: 5})
	if !errors.Is(err, context.DeadlineExceeded) || res.Kernels != 0 {
		t.Fatalf("%d kernels, error %v; want 0, deadline exceeded", res.Kernels, err)
	}
}

func TestLatency(t *testing.T) {
	h, c := openChannel(t, sdktest.Config{}, 3)
	res, err := workload.Latency(testCtx(t), c, workload.LatencyConfig{Count: 200, Warmup: 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != 200 || res.Channel != 3 || res.Workload != "latency" {
		t.Errorf("result %+v", res)
	}
	checkOrdered(t, res.RoundTrip, 1)
	if c.Completed() != 210 || h.Doorbells(3) != 210 {
		t.Errorf("host completed %d, doorbells %d; want 210 each", c.Completed(), h.Doorbells(3))
	}
	if _, err := workload.Latency(testCtx(t), c, workload.LatencyConfig{}); err == nil {
		t.Error("zero count accepted")
	}
}

func TestLatencyChannelError(t *testing.T) {
	_, c := openChannel(t, sdktest.Config{Handler: sdktest.FailAt(0, 4, abi.ErrShutdown)}, 0)
	res, err := workload.Latency(testCtx(t), c, workload.LatencyConfig{Count: 10})
	if !errors.Is(err, abi.ErrShutdown) || res.Count != 4 {
		t.Fatalf("%d round trips, error %v; want 4, shutdown", res.Count, err)
	}
}

func TestThrottleDepth(t *testing.T) {
	_, c := openChannel(t, sdktest.Config{}, 0)
	cfg := workload.ThrottleConfig{Kernel: 10 * time.Microsecond, Kernels: 50, Depth: 4}
	res, err := workload.Throttle(testCtx(t), c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kernels != 50 || uint64(res.Kernels) != c.Completed() || res.SubmittedGPUNs != 50*int64(10*time.Microsecond) {
		t.Fatalf("%d kernels, host completed %d, %d ns", res.Kernels, c.Completed(), res.SubmittedGPUNs)
	}
	if _, err := workload.Throttle(testCtx(t), c, workload.ThrottleConfig{Kernel: 1, Kernels: 1, Depth: -1}); err == nil {
		t.Fatal("negative depth accepted")
	}
}

// TestMemset: buffers allocated up to the host's refusal (reported, not an
// error), MEMSETs over them in turn, every buffer freed; no buffer at all
// is an error.
func TestMemset(t *testing.T) {
	var ops []abi.Command
	handler := func(_, _ uint32, cmd abi.Command) abi.ErrorCode {
		ops = append(ops, cmd)
		if cmd.Op == abi.OpAlloc && cmd.Handle >= 13 {
			return abi.ErrNoMemory // room for three buffers from handle 10
		}
		return abi.OK
	}
	_, c := openChannel(t, sdktest.Config{Handler: handler}, 0)
	cfg := workload.MemsetConfig{Size: 4096, Buffers: 5, FirstHandle: 10, Depth: 2, Count: 7}
	res, err := workload.Memset(testCtx(t), c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Buffers != 3 || res.AllocError != "no memory" || res.Memsets != 7 || res.Bytes != 7*4096 || res.Workload != "memset" {
		t.Errorf("result %+v", res)
	}
	var memsets, frees []uint32
	for _, op := range ops {
		switch op.Op {
		case abi.OpMemset:
			if op.Length != 4096 {
				t.Errorf("a MEMSET of %d bytes, want 4096", op.Length)
			}
			memsets = append(memsets, op.Handle)
		case abi.OpFree:
			frees = append(frees, op.Handle)
		}
	}
	if want := []uint32{10, 11, 12, 10, 11, 12, 10}; !slices.Equal(memsets, want) {
		t.Errorf("MEMSETs on %v, want %v", memsets, want)
	}
	if want := []uint32{10, 11, 12}; !slices.Equal(frees, want) {
		t.Errorf("FREEs of %v, want %v", frees, want)
	}

	cfg.FirstHandle = 20
	res, err = workload.Memset(testCtx(t), c, cfg)
	if err == nil || res.Buffers != 0 || res.AllocError != "no memory" || res.Memsets != 0 {
		t.Errorf("no room at all: %+v, %v; want an error", res, err)
	}
	if err := (workload.MemsetConfig{Size: 1, Buffers: 2, FirstHandle: abi.MaxHandle}).Validate(); err == nil {
		t.Error("handles past MaxHandle validate")
	}
}

// TestThrottleInFlight: kernels back to back are kept InFlight deep (at most
// the ring's entries), an explicit Depth wins, and a throttle with sleeps
// waits for each kernel, as LoGA's does.
func TestThrottleInFlight(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  workload.ThrottleConfig
		want int
	}{
		{"in flight", workload.ThrottleConfig{Kernel: time.Millisecond, InFlight: 20 * time.Millisecond}, 20},
		{"rounded up", workload.ThrottleConfig{Kernel: 300 * time.Microsecond, InFlight: time.Millisecond}, 4},
		{"the ring's entries at most", workload.ThrottleConfig{Kernel: 10 * time.Microsecond, InFlight: 20 * time.Millisecond}, -1},
		{"depth given", workload.ThrottleConfig{Kernel: time.Millisecond, Depth: 3, InFlight: 20 * time.Millisecond}, 3},
		{"with sleeps", workload.ThrottleConfig{Kernel: time.Millisecond, Sleep: time.Microsecond, InFlight: 20 * time.Millisecond}, 1},
		{"no in-flight time", workload.ThrottleConfig{Kernel: time.Millisecond}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, c := openChannel(t, sdktest.Config{}, 0)
			want := tt.want
			if want < 0 {
				want = c.Entries()
			}
			tt.cfg.Kernels = 2 * want
			res, err := workload.Throttle(testCtx(t), c, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Depth != want || res.Kernels != 2*want {
				t.Errorf("depth %d, %d kernels; want depth %d, %d kernels", res.Depth, res.Kernels, want, 2*want)
			}
		})
	}
}

// TestLatencyCauses: every round trip gets a class. The fake host does not
// poll its rings, so every submission rings; a host that takes longer
// than the wait's spin makes the waits sleep.
func TestLatencyCauses(t *testing.T) {
	check := func(res workload.LatencyResult, want string, atLeast int) {
		t.Helper()
		if len(res.Causes) != 5 {
			t.Fatalf("%d classes, want 5: %+v", len(res.Causes), res.Causes)
		}
		total := 0
		for _, c := range res.Causes {
			total += c.Count
			if c.Class == want && c.Count < atLeast {
				t.Errorf("%d round trips %s, want at least %d: %+v", c.Count, want, atLeast, res.Causes)
			}
		}
		if total != res.Count {
			t.Errorf("classes hold %d round trips of %d: %+v", total, res.Count, res.Causes)
		}
	}
	_, c := openChannel(t, sdktest.Config{}, 0)
	res, err := workload.Latency(testCtx(t), c, workload.LatencyConfig{Count: 200, Causes: true})
	if err != nil {
		t.Fatal(err)
	}
	check(res, "rang", 200)

	slow := func(_, _ uint32, _ abi.Command) abi.ErrorCode { time.Sleep(300 * time.Microsecond); return abi.OK }
	_, c = openChannel(t, sdktest.Config{Wake: true, Handler: slow}, 0)
	if res, err = workload.Latency(testCtx(t), c, workload.LatencyConfig{Count: 20, Causes: true}); err != nil {
		t.Fatal(err)
	}
	check(res, "slept", 1)
	if res, err = workload.Latency(testCtx(t), c, workload.LatencyConfig{Count: 5}); err != nil || res.Causes != nil {
		t.Fatalf("without Causes: %+v, %v; want no classes", res.Causes, err)
	}
}
