package usage

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkJournalCommit is one group commit of the daemon's journal: a
// record for each of vms VMs, one write and one fdatasync, on the disk
// that holds the test's temporary directory (go test -benchtime; set
// TMPDIR to measure another). It reports the commit's latency percentiles
// and the bytes one commit writes.
func BenchmarkJournalCommit(b *testing.B) {
	for _, vms := range []int{1, 8} {
		b.Run(fmt.Sprintf("vms=%d", vms), func(b *testing.B) {
			j, err := CreateJournal(filepath.Join(b.TempDir(), "usage.journal"), 1)
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			ds := make([]Delta, vms)
			for i := range ds {
				ds[i] = Delta{Name: fmt.Sprintf("vm-%03d", i), Since: since, Usage: Record{GPUNs: 5_000_000, Kernels: 50, Commands: 50}}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if err := j.Append(ds); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				if j.Size() > 1<<20 { // as the daemon's rotation does
					if err := j.Switch().Reset(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) }
			b.ReportMetric(q(0.5), "p50-ns")
			b.ReportMetric(q(0.99), "p99-ns")
			b.ReportMetric(q(1), "max-ns")
			b.ReportMetric(float64(len(appendDelta(nil, ds[0]))*vms), "bytes/commit")
		})
	}
}

// BenchmarkEncodeDelta is the CPU cost of one record.
func BenchmarkEncodeDelta(b *testing.B) {
	d := Delta{Seq: 1, Name: "vm-001", Since: since, Usage: Record{GPUNs: 5_000_000, Kernels: 50, Commands: 50}}
	buf := make([]byte, 0, maxRecord)
	for b.Loop() {
		buf = appendDelta(buf[:0], d)
	}
}
