package vm

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/spin"
)

// spinModes are the doorbell goroutine's two ways: sleeping in epoll
// between doorbells, and busy-polling the rings after them (the defaults).
var spinModes = []struct {
	name string
	cfg  spin.Config
}{{"off", spin.Config{}}, {"spin", spin.DefaultConfig()}}

// BenchmarkNOPRoundTrip measures a process guest's NOP round trips (submit
// and doorbell until get is seen) against a VM whose backend completes in
// Submit, with the doorbell goroutine sleeping in epoll between doorbells
// (off) and busy-polling the ring after them (spin: the default window
// and cap), so that the difference is the doorbell path's alone.
func BenchmarkNOPRoundTrip(b *testing.B) {
	for _, bc := range spinModes {
		b.Run(bc.name, func(b *testing.B) {
			_, _, ch := stormVM(b, "bench", Config{SpinWindow: bc.cfg.Window, SpinBudget: spin.NewBudget(bc.cfg.Cores)})
			ctx := context.Background()
			rtt := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				idx, err := ch.Submit(ctx, abi.Command{Op: abi.OpNop})
				if err == nil {
					err = ch.Wait(ctx, idx)
				}
				if err != nil {
					b.Fatal(err)
				}
				rtt = append(rtt, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(rtt)
			b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(rtt[len(rtt)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
