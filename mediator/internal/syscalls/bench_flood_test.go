package syscalls

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
)

// BenchmarkQuietBesideFlood is a quiet VM's null round trip (one caller)
// alone and beside another VM whose 64 callers flood their slots with
// non-blocking null calls: p50 and p99 of both, each VM with its own
// forwarder and sluice-proxy process.
func BenchmarkQuietBesideFlood(b *testing.B) {
	bin := proxyBinary(b)
	quiet := newVM(b, 64, DefaultConfig(), bin)
	quiet.call(b, 0, abi.SysNull)
	measure := func() []time.Duration {
		lat := make([]time.Duration, 0, b.N)
		for range b.N {
			t0 := time.Now()
			if r := quiet.call(b, 0, abi.SysNull); r.Errno != 0 {
				b.Fatalf("quiet VM's call: %+v", r)
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		return lat
	}
	b.ResetTimer()
	alone := measure()
	flood := newVM(b, 1024, DefaultConfig(), bin)
	stop := flood.flood(64)
	time.Sleep(10 * time.Millisecond) // the flood is on
	beside := measure()
	stop()
	b.StopTimer()
	for _, m := range []struct {
		name string
		lat  []time.Duration
	}{{"alone", alone}, {"flood", beside}} {
		b.ReportMetric(float64(m.lat[len(m.lat)/2].Nanoseconds()), m.name+"-p50-ns")
		b.ReportMetric(float64(m.lat[len(m.lat)*99/100].Nanoseconds()), m.name+"-p99-ns")
	}
	b.ReportMetric(float64(flood.f.Stats().Calls["null"]), "flood-calls")
}
