package syscalls

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall"
)

// BenchmarkPollerSaturated keeps every one of 1024 slots busy with blocking
// null calls, as 1024 GPU callers that own their slots do: a few driver
// goroutines walk their slots and, for each FINISHED one, take the result,
// free it and publish the next call at once (seq kept, ready hint set,
// exactly the PTX library's owned-slot path). The poller is the bound; the
// benchmark reports calls/s and the poller's busy time per call, whose
// inverse is the calls per second one poller core serves.
func BenchmarkPollerSaturated(b *testing.B) {
	for _, bin := range []string{"in-process", "binary"} {
		b.Run("proxy="+bin, func(b *testing.B) {
			path := ""
			if bin == "binary" {
				path = proxyBinary(b)
			}
			const slots = 1024
			v := newVM(b, slots, DefaultConfig(), path)
			v.call(b, 0, abi.SysNull) // the proxy is up
			drivers := max(1, min(4, runtime.GOMAXPROCS(0)/4))
			var done atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			st0 := v.f.Stats()
			b.ResetTimer()
			t0 := time.Now()
			for d := range drivers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					driveSlots(v.guest, uint32(d*slots/drivers), uint32((d+1)*slots/drivers), int64(b.N), &done, stop)
				}()
			}
			for done.Load() < int64(b.N) {
				time.Sleep(100 * time.Microsecond)
			}
			el := time.Since(t0)
			close(stop)
			wg.Wait()
			b.StopTimer()
			st := v.f.Stats()
			n := float64(done.Load())
			served := float64(st.Served - st0.Served)
			busy := float64((st.PollerBusy - st0.PollerBusy).Nanoseconds())
			b.ReportMetric(n/el.Seconds(), "calls/s")
			b.ReportMetric(busy/served, "poller-ns/call")
			b.ReportMetric(float64(st.ScanPasses-st0.ScanPasses)/served, "passes/call")
			if st.Raced != st0.Raced || st.Lost != st0.Lost {
				b.Fatalf("raced %d lost %d", st.Raced-st0.Raced, st.Lost-st0.Lost)
			}
		})
	}
}

// driveSlots keeps slots [lo, hi) busy with blocking null calls until done
// reaches total or stop closes; each finished call adds one to done. A
// FINISHED slot is freed (Wait returns at once) and published again with
// the next sequence number, without a claim: the slot is the driver's own.
func driveSlots(guest *slotcall.Area, lo, hi uint32, total int64, done *atomic.Int64, stop <-chan struct{}) {
	null := slotcall.Request{Number: abi.SysNull, Flags: abi.SysFlagBlocking}
	seq := make([]uint32, hi-lo)
	for i := lo; i < hi; i++ {
		_, seq[i-lo] = guest.State(i)
		guest.Publish(slotcall.Ticket{Slot: i, Seq: seq[i-lo]}, null)
	}
	for k := 0; ; k++ {
		if k%64 == 0 {
			select {
			case <-stop:
				return
			default:
			}
		}
		for i := lo; i < hi; i++ {
			if st, _ := guest.State(i); st != abi.SlotFinished {
				continue
			}
			if _, err := guest.Wait(slotcall.Ticket{Slot: i, Seq: seq[i-lo]}); err != nil {
				panic(err)
			}
			seq[i-lo] = abi.NextSeq(seq[i-lo])
			if done.Add(1) <= total {
				guest.Publish(slotcall.Ticket{Slot: i, Seq: seq[i-lo]}, null)
			}
		}
	}
}
