package daemon

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/guest-agent/workload"
	"github.com/sluice-gpu/sluice/mediator/internal/usage"
)

// BenchmarkJournalCommit is one interval's commit of 8 VMs whose counters
// all moved, as the daemon's loop makes it: read each VM's counters, one
// record each, one write, the syncer kicked (its fdatasyncs run beside the
// loop, as in the daemon, one for all the writes before it). ns/op is the
// loop's latency unpaced, where the syncer's fdatasyncs each cover many
// commits; paced=5ms commits once per default interval, each with its own
// fdatasync, as the daemon does under load (no-fdatasync: without the
// syncer), and baseline is the same daemon ticking without committing: cpu-ns/commit is the process's CPU
// (the syncer's included), and the journal's CPU share of a core is
// (paced - baseline) / 5ms. A VM's record sums its completions in the
// interval, so the cost does not grow with the completion rate.
func BenchmarkJournalCommit(b *testing.B) {
	const vms = 8
	d := newDaemon(b, "virtual", b.TempDir())
	for i := range vms {
		ch := channel(b, guest(b, createVM(b, d, fmt.Sprintf("vm-%d", i))), 0)
		if _, err := workload.Throttle(context.Background(), ch, workload.ThrottleConfig{Kernel: 100 * time.Microsecond, Kernels: 50}); err != nil {
			b.Fatal(err)
		}
	}
	es := d.entries()
	jr := d.journal
	jr.close() // the benchmark is the loop, and runs the syncer itself
	jr.rotate = 0
	for _, bc := range []struct {
		name         string
		pace         time.Duration
		commit, sync bool
	}{
		{"unpaced", 0, true, true},
		{"paced=5ms", DefaultJournalInterval, true, true},
		{"paced=5ms/no-fdatasync", DefaultJournalInterval, true, false},
		{"baseline", DefaultJournalInterval, false, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.sync {
				ctx, cancel := context.WithCancel(context.Background())
				jr.wg.Add(1)
				go jr.syncer(ctx)
				defer func() { cancel(); jr.wg.Wait() }()
			}
			var tick <-chan time.Time
			if bc.pace > 0 {
				t := time.NewTicker(bc.pace)
				defer t.Stop()
				tick = t.C
			}
			cpu0, n := cpuNs(b), 0
			for b.Loop() {
				if tick != nil {
					<-tick
				}
				if bc.commit {
					benchCommit(b, jr, es)
				}
				if n++; n%200 == 0 { // the daemon rotates every second
					if err := jr.maybeRotate(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(cpuNs(b)-cpu0)/float64(n), "cpu-ns/commit")
		})
	}
}

// benchCommit commits es as if every VM had moved since the last commit.
func benchCommit(b *testing.B, jr *journaler, es []*entry) {
	jr.mu.Lock()
	for _, e := range es {
		e.journaled = usage.Record{}
	}
	jr.mu.Unlock()
	if _, err := jr.commit(es, false); err != nil {
		b.Fatal(err)
	}
}

// cpuNs is the process's user and system CPU time so far.
func cpuNs(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
