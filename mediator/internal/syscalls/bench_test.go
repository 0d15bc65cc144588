package syscalls

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall"
	"github.com/sluice-gpu/sluice/mediator/internal/proxy"
)

// The benchmarks drive the forwarder and a sluice-proxy process (built
// once, unsandboxed: the sandbox costs nothing per call) from guest threads of this process that play the GPU's work-items
// through internal/slotcall, as the sim's programs do. On the H100 the same
// paths are measured from real kernels (bench/results/h100).

// BenchmarkNullRoundTrip is one caller's blocking null call: p50 and p99.
// Host CPU per call: this process (forwarder and caller) and the proxy.
// The proxy spins as the binary does by default (on 4 processors or more),
// and never (it sleeps on its socket after each batch: a kick per call).
func BenchmarkNullRoundTrip(b *testing.B) {
	for _, spin := range []bool{true, false} {
		b.Run(fmt.Sprintf("proxy-spin=%v", spin), func(b *testing.B) {
			v := newVMWith(b, 64, DefaultConfig(), proxyBinary(b), func(c *proxy.StartConfig) {
				if !spin {
					c.Spin, c.ContextSpin = -1, -1
				}
			})
			benchNullRoundTrip(b, v)
		})
	}
}

func benchNullRoundTrip(b *testing.B, v *realVM) {
	v.call(b, 0, abi.SysNull) // the proxy is up
	lat := make([]time.Duration, 0, b.N)
	c0, p0 := processCPU(), v.proxyCPU()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		v.call(b, 0, abi.SysNull)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
	b.ReportMetric(float64((processCPU()-c0).Nanoseconds())/float64(b.N), "mediator-cpu-ns")
	b.ReportMetric(float64((v.proxyCPU()-p0).Nanoseconds())/float64(b.N), "proxy-cpu-ns")
}

// BenchmarkNullSparse is one caller's null call every 100 µs (plus the sleep's slack), with the
// proxy's spins on (the binary's defaults) and off: what the spin window
// costs in CPU when calls come slower than it lasts, and what it saves in
// latency. The forwarder spins as configured (it must: a GPU caller rings
// no doorbell per call).
func BenchmarkNullSparse(b *testing.B) {
	for _, spin := range []time.Duration{0, proxy.DefaultSpin} {
		b.Run(fmt.Sprintf("proxy-spin=%v", spin), func(b *testing.B) {
			v := newVMWith(b, 64, DefaultConfig(), proxyBinary(b), func(c *proxy.StartConfig) {
				c.Spin, c.ContextSpin = -1, -1
				if spin > 0 {
					c.Spin, c.ContextSpin = spin, proxy.DefaultContextSpin
				}
			})
			v.call(b, 0, abi.SysNull)
			n := min(b.N, 500)
			lat := make([]time.Duration, 0, n)
			c0, p0 := processCPU(), v.proxyCPU()
			b.ResetTimer()
			for range n {
				time.Sleep(100 * time.Microsecond)
				t0 := time.Now()
				v.call(b, 0, abi.SysNull)
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			reportPercentiles(b, lat)
			b.ReportMetric(float64((processCPU()-c0).Nanoseconds())/float64(n), "mediator-cpu-ns")
			b.ReportMetric(float64((v.proxyCPU()-p0).Nanoseconds())/float64(n), "proxy-cpu-ns")
		})
	}
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkNullThroughput is null calls per second from 1, 32 and 1024
// concurrent callers, each with a slot of its own, with and without a
// coalescing window.
func BenchmarkNullThroughput(b *testing.B) {
	for _, callers := range []int{1, 32, 1024} {
		for _, window := range []time.Duration{0, 20 * time.Microsecond} {
			b.Run(fmt.Sprintf("callers=%d/window=%v", callers, window), func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.Window, cfg.Batch = window, 1024
				v := newVM(b, 1024, cfg, proxyBinary(b))
				v.call(b, 0, abi.SysNull)
				per := max(b.N/callers, 1)
				b.ResetTimer()
				t0 := time.Now()
				var wg sync.WaitGroup
				for c := range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range per {
							if _, err := v.guest.Call(uint32(c), slotcall.Request{Number: abi.SysNull, Flags: abi.SysFlagBlocking}); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(per*callers)/time.Since(t0).Seconds(), "calls/s")
				b.ReportMetric(float64(v.f.Stats().Batches), "batches")
			})
		}
	}
}

// BenchmarkPread4K compares a generic pread64 of 4 KiB with the fastcall
// currying the same call, b.N of each, and reports their ratio along with
// the host CPU per call: this process's (the forwarder and the caller) and
// the proxy's, and the ratio of their sums.
func BenchmarkPread4K(b *testing.B) {
	v := newVM(b, 64, DefaultConfig(), proxyBinary(b))
	if err := os.WriteFile(filepath.Join(v.dir, "blob"), make([]byte, 1<<20), 0o644); err != nil {
		b.Fatal(err)
	}
	fd := v.call(b, 0, abi.SysOpenat, atFDCWD, v.putString(0, "blob"), 0, 0)
	num := v.call(b, 0, abi.SysFastcallRegister, uint64(abi.SysPread64), uint64(fd.Ret), 8192, 4096, 4096)
	if fd.Errno != 0 || num.Errno != 0 {
		b.Fatalf("open %+v, register %+v", fd, num)
	}
	generic := slotcall.Request{Number: abi.SysPread64, Flags: abi.SysFlagBlocking, Args: [6]uint64{uint64(fd.Ret), 8192, 4096, 4096}}
	fast := slotcall.Request{Number: uint16(num.Ret), Flags: abi.SysFlagBlocking | abi.SysFlagFastcall}
	var wall, cpu, pcpu [2]time.Duration
	b.ResetTimer()
	// One kind after the other, each whole run timed (reading the proxy's
	// CPU between calls would outlast the spin windows).
	for k, req := range []slotcall.Request{generic, fast} {
		p0, c0, t0 := v.proxyCPU(), processCPU(), time.Now()
		for i := range b.N {
			res, err := v.guest.Call(1, req)
			if err != nil || res.Ret != 4096 {
				b.Fatalf("call %d (%d): %+v %v", i, k, res, err)
			}
		}
		wall[k] = time.Since(t0)
		cpu[k] = processCPU() - c0
		pcpu[k] = v.proxyCPU() - p0
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(wall[0].Nanoseconds())/n, "generic-ns")
	b.ReportMetric(float64(wall[1].Nanoseconds())/n, "fastcall-ns")
	b.ReportMetric(float64(wall[0])/float64(wall[1]), "ratio")
	b.ReportMetric(float64(cpu[0].Nanoseconds())/n, "generic-cpu-ns")
	b.ReportMetric(float64(cpu[1].Nanoseconds())/n, "fastcall-cpu-ns")
	b.ReportMetric(float64(pcpu[0].Nanoseconds())/n, "generic-proxy-cpu-ns")
	b.ReportMetric(float64(pcpu[1].Nanoseconds())/n, "fastcall-proxy-cpu-ns")
	b.ReportMetric(float64((cpu[0]+pcpu[0]).Nanoseconds())/float64((cpu[1]+pcpu[1]).Nanoseconds()), "cpu-ratio")
}

// proxyCPU is the proxy process's CPU time so far, in nanoseconds from
// schedstat (its threads'), 0 for an in-process proxy.
func (v *realVM) proxyCPU() time.Duration {
	pid := v.f.Stats().ProxyPID
	if pid == 0 || pid == os.Getpid() {
		return 0
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var t time.Duration
	for _, path := range tasks {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var ns int64
		if _, err := fmt.Sscan(string(b), &ns); err == nil {
			t += time.Duration(ns)
		}
	}
	return t
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClock is one read of the clock the poller stamps its passes
// with (time.Since: the vDSO's clock_gettime where the clock source allows).
func BenchmarkClock(b *testing.B) {
	t0 := time.Now()
	var d time.Duration
	for range b.N {
		d += time.Since(t0)
	}
	if d < 0 {
		b.Fatal(d)
	}
}

// BenchmarkScanIdle is one scan pass over 1024 slots none of which is READY:
// what every call waits half of to be seen while the poller spins (and the
// poller's own pass runs beside it).
func BenchmarkScanIdle(b *testing.B) {
	idlePasses(b, true)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1024, "ns/slot")
}

// BenchmarkPassIdle is one pass of a spinning poller over 1024 idle slots
// with the ready map: the map's 128 words, and the sweep's chunk when one
// is due. Half of it is what a call waits to be seen.
func BenchmarkPassIdle(b *testing.B) { idlePasses(b, false) }

// idlePasses runs b.N scan passes over 1024 idle slots, whole (every state
// word) or as a spinning poller's pass.
func idlePasses(b *testing.B, whole bool) {
	v := newRealVM(b, 1024, DefaultConfig())
	var next uint32
	b.ResetTimer()
	for range b.N {
		if got := v.f.scan(nil, 1, &next, nil, whole, v.f.now()); len(got) != 0 {
			b.Fatal("a READY slot in an idle area")
		}
	}
}
