package usage

import (
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// cpuNs is the process's user and system CPU time so far.
func cpuNs(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func benchDeltas(vms int) []Delta {
	ds := make([]Delta, vms)
	for i := range ds {
		// 5ms of 10k completions/s: 50 commands of 100µs.
		ds[i] = Delta{Name: fmt.Sprintf("vm-%03d", i), Since: since, Usage: Record{GPUNs: 5_000_000, Kernels: 50, Commands: 50}}
	}
	return ds
}

// BenchmarkJournalCommit is one group commit as the daemon makes it, a
// record for each of vms VMs in one write, then (sync=true) the fdatasync
// that the daemon's syncer runs behind it, on the disk that holds the
// test's temporary directory (set TMPDIR to measure another). It reports
// the latency percentiles of the whole, the process CPU per commit (user
// and system) and the bytes one commit writes.
func BenchmarkJournalCommit(b *testing.B) {
	for _, vms := range []int{1, 8} {
		for _, sync := range []bool{false, true} {
			b.Run(fmt.Sprintf("vms=%d/sync=%v", vms, sync), func(b *testing.B) {
				j, err := CreateJournal(filepath.Join(b.TempDir(), "usage.journal"), 1)
				if err != nil {
					b.Fatal(err)
				}
				defer j.Close()
				ds := benchDeltas(vms)
				lat := make([]time.Duration, 0, 1024)
				cpu0 := cpuNs(b)
				for b.Loop() {
					t0 := time.Now()
					if err := j.Write(ds); err != nil {
						b.Fatal(err)
					}
					if sync {
						if err := j.Sync(); err != nil {
							b.Fatal(err)
						}
					}
					lat = append(lat, time.Since(t0))
					if j.Size() > 1<<20 { // as the daemon's rotation does
						if err := j.Switch().Reset(); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(cpuNs(b)-cpu0)/float64(len(lat)), "cpu-ns/commit")
				slices.Sort(lat)
				q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) }
				b.ReportMetric(q(0.5), "p50-ns")
				b.ReportMetric(q(0.99), "p99-ns")
				b.ReportMetric(q(1), "max-ns")
				b.ReportMetric(float64(len(appendDelta(nil, ds[0]))*vms), "bytes/commit")
			})
		}
	}
}

// BenchmarkEncodeDelta is the CPU cost of encoding one record.
func BenchmarkEncodeDelta(b *testing.B) {
	d := benchDeltas(1)[0]
	d.Seq = 1
	buf := make([]byte, 0, maxRecord)
	for b.Loop() {
		buf = appendDelta(buf[:0], d)
	}
}
