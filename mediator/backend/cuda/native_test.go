package cuda

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// runNativeFake runs p on d from a goroutine locked to its thread, as the
// native process runs it.
func runNativeFake(t *testing.T, d *fakeDriver, p NativePlan) (*NativeResult, error) {
	t.Helper()
	type out struct {
		res *NativeResult
		err error
	}
	ch := make(chan out, 1)
	go func() {
		runtime.LockOSThread()
		res, err := runNative(context.Background(), d, p)
		ch <- out{res, err}
	}()
	select {
	case o := <-ch:
		return o.res, o.err
	case <-time.After(30 * time.Second):
		t.Fatal("the native run did not end")
		return nil, nil
	}
}

func TestNativeApps(t *testing.T) {
	d := newFake()
	p := NativePlan{VMs: []NativeVM{
		{Name: "a", Streams: 2, Depth: 3, KernelNs: 5000, Kernels: 100},
		{Name: "b", Streams: 1, Depth: 64, KernelNs: 10_000_000, Kernels: 7, SleepNs: 1000},
	}}
	res, err := runNativeFake(t, d, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Device != "Fake GPU" || len(res.VMs) != 2 {
		t.Fatalf("result %+v", res)
	}
	a, b := res.VMs[0], res.VMs[1]
	if a.Name != "a" || a.Kernels != 100 || a.GPUNs != 100*5000 || b.Kernels != 7 || b.GPUNs != 7*10_000_000 {
		t.Errorf("vms %+v %+v: want 100 kernels of 5 µs and 7 of 10 ms", a, b)
	}
	if res.Kernels != 107 || res.GPUBusyNs != a.GPUNs+b.GPUNs {
		t.Errorf("totals: %d kernels, %d ns busy", res.Kernels, res.GPUBusyNs)
	}
	// The fake runs kernels one after another on its timer: their spans
	// are back to back, the union is their sum.
	if res.GPUSpanNs != res.GPUBusyNs {
		t.Errorf("span %d, want %d", res.GPUSpanNs, res.GPUBusyNs)
	}
	if a.TurnaroundNs <= 0 || b.TurnaroundNs <= 0 || a.LatencyP99Ns < a.LatencyP50Ns {
		t.Errorf("turnaround or latency: %+v %+v", a, b)
	}
	// Every launch is the throttle kernel with the VM's length, one thread,
	// sequence numbers from 1 on each stream, in the context's own memory.
	launches := d.launched()
	if len(launches) != 107 {
		t.Fatalf("%d launches, want 107", len(launches))
	}
	perNs := map[uint64]int{}
	for _, l := range launches {
		if l.name != throttleName || l.grid != [3]uint32{1, 1, 1} || l.block != [3]uint32{1, 1, 1} {
			t.Fatalf("launch %+v", l)
		}
		if gap := le.Uint64(l.args[16:]); gap != DefaultGapNs {
			t.Errorf("gap %d, want %d", gap, DefaultGapNs)
		}
		perNs[le.Uint64(l.args[8:])]++
	}
	if perNs[5000] != 100 || perNs[10_000_000] != 7 {
		t.Errorf("kernel lengths %v", perNs)
	}
	if d.wrongContexts() != 0 {
		t.Errorf("%d calls with another context current", d.wrongContexts())
	}
}

func TestNativeThrottlePaced(t *testing.T) {
	d := newFake()
	p := NativePlan{DurationNs: int64(200 * time.Millisecond), VMs: []NativeVM{
		// A kernel every 2 ms on each of two streams: about 100 each.
		{Name: "steady", Streams: 2, Depth: 1, KernelNs: 1000, SleepNs: int64(2 * time.Millisecond)},
		// The same, on for 20 ms and off for 20 ms: about half as many.
		{Name: "bursty", Streams: 1, Depth: 1, KernelNs: 1000, SleepNs: int64(2 * time.Millisecond),
			OnNs: int64(20 * time.Millisecond), OffNs: int64(20 * time.Millisecond)},
		// Starts after 150 ms: about a quarter.
		{Name: "late", Streams: 1, Depth: 1, KernelNs: 1000, SleepNs: int64(2 * time.Millisecond),
			StartNs: int64(150 * time.Millisecond)},
	}}
	res, err := runNativeFake(t, d, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.DurationNs < p.DurationNs {
		t.Errorf("stretch %d shorter than the duration %d", res.DurationNs, p.DurationNs)
	}
	steady, bursty, late := res.VMs[0].Kernels, res.VMs[1].Kernels, res.VMs[2].Kernels
	// Timers on a loaded machine run late, never early: upper bounds are
	// firm, lower ones loose.
	if steady > 2*101 || steady < 2*30 {
		t.Errorf("steady: %d kernels, want about 200", steady)
	}
	if bursty > 51+5 || bursty < 10 || bursty >= steady/2+10 {
		t.Errorf("bursty: %d kernels, want about half of one stream of steady (%d)", bursty, steady/2)
	}
	if late > 26 || late < 3 {
		t.Errorf("late: %d kernels, want about 25", late)
	}
	if res.VMs[0].TurnaroundNs != 0 {
		t.Errorf("a throttle VM has a turnaround: %+v", res.VMs[0])
	}
}

func TestNativeErrors(t *testing.T) {
	d := newFake()
	d.setErr(&d.streamErr, cudaErrorOutOfMemory)
	_, err := runNativeFake(t, d, NativePlan{VMs: []NativeVM{{Name: "a", Streams: 1, Depth: 1, KernelNs: 1, Kernels: 1}}})
	if !errors.Is(err, cudaErrorOutOfMemory) || !strings.Contains(err.Error(), "creating a stream of vm a") {
		t.Errorf("StreamCreate failing: %v", err)
	}
	for _, p := range []NativePlan{
		{},
		{VMs: []NativeVM{{Name: "a", Streams: 0, Depth: 1}}},
		{VMs: []NativeVM{{Name: "a", Streams: 1, Depth: 0}}},
		{VMs: []NativeVM{{Name: "a", Streams: 1, Depth: 1, OnNs: 5}}},
		{VMs: []NativeVM{{Name: "a", Streams: 1, Depth: 1, KernelNs: -1}}},
		{DurationNs: -1, VMs: []NativeVM{{Name: "a", Streams: 1, Depth: 1}}},
	} {
		if err := p.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", p)
		}
	}
}

// TestRunNativeProcess runs the native baseline's process (this test binary,
// started again) with a driver that is not there: its error comes back.
func TestRunNativeProcess(t *testing.T) {
	_, err := RunNative(context.Background(), NativePlan{Library: "/nonexistent/libcuda.so.1",
		VMs: []NativeVM{{Name: "a", Streams: 1, Depth: 1, KernelNs: 1, Kernels: 1}}})
	if err == nil || !strings.Contains(err.Error(), "loading the CUDA driver /nonexistent/libcuda.so.1") {
		t.Fatalf("RunNative without a driver: %v", err)
	}
}

func TestMergeSpans(t *testing.T) {
	got := mergeSpans([][2]uint64{{10, 20}, {0, 5}, {15, 30}, {30, 31}, {40, 41}, {5, 6}})
	want := [][2]uint64{{0, 6}, {10, 31}, {40, 41}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// TestGPUNative runs the native baseline on a real GPU: an app VM's kernels
// all complete, each measuring about its length on %globaltimer, and a
// throttle VM on two streams keeps the GPU busy for about the duration
// twice over (its streams' one-thread kernels run side by side).
func TestGPUNative(t *testing.T) {
	gpuBackend(t, nil) // skips without a GPU; the native run is a process of its own
	p := NativePlan{Library: os.Getenv("SLUICE_LIBCUDA"), DurationNs: int64(500 * time.Millisecond), VMs: []NativeVM{
		{Name: "job", Streams: 1, Depth: 4, KernelNs: 100_000, Kernels: 1000},
		{Name: "two", Streams: 2, Depth: 8, KernelNs: 1_000_000},
	}}
	res, err := RunNative(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("native on %s: %+v", res.Device, res)
	job, two := res.VMs[0], res.VMs[1]
	if job.Kernels != 1000 || job.TurnaroundNs <= 0 {
		t.Errorf("job: %+v, want 1000 kernels and a turnaround", job)
	}
	if per := float64(job.GPUNs) / 1000; per < 98_000 || per > 103_000 {
		t.Errorf("job: %.0f ns a kernel on %%globaltimer, want about 100000", per)
	}
	if busy := float64(two.GPUNs) / float64(res.DurationNs); busy < 1.8 || busy > 2.05 {
		t.Errorf("two streams busy %.3f of the stretch, want about 2", busy)
	}
	if res.GPUSpanNs <= 0 || res.GPUSpanNs > res.DurationNs+int64(10*time.Millisecond) {
		t.Errorf("span %d over a stretch of %d", res.GPUSpanNs, res.DurationNs)
	}
}
