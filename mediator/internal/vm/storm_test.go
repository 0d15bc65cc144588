package vm

import (
	"context"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/internal/spin"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
)

// stormVM is a one-channel VM on an instantGPU with cfg's doorbell limit
// and spinning, and a process guest joined to it.
func stormVM(t testing.TB, name string, cfg Config) (*VM, *sdk.Device, *sdk.Channel) {
	t.Helper()
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name, cfg.ID, cfg.Weight, cfg.Layout, cfg.Limits = name, 1, 1, l, abi.DefaultLimits()
	cfg.Socket = filepath.Join(t.TempDir(), name+".sock")
	v, err := New(cfg, backendOf{&instantGPU{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	dev := dial(t, v)
	ch, err := dev.Channel(0)
	if err != nil {
		t.Fatal(err)
	}
	return v, dev, ch
}

// TestStormLimited: a guest ringing its doorbell as fast as it can, with
// a NOP now and then, is limited: the mediator handles its doorbells at a
// bounded rate, every one of its commands completes, the muted signals are
// counted, and another VM's NOP round trips stay far below the mute.
func TestStormLimited(t *testing.T) {
	const limit = 5000
	storm, dev, ch := stormVM(t, "storm", Config{DoorbellLimit: limit})
	_, _, quiet := stormVM(t, "quiet", Config{DoorbellLimit: limit})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const runFor = 500 * time.Millisecond
	var rung, submitted atomic.Uint64
	var last atomic.Uint32
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		for time.Since(start) < runFor {
			for range 1000 {
				if err := dev.Doorbell(0); err != nil {
					done <- err
					return
				}
			}
			rung.Add(1000)
			idx, err := ch.Submit(ctx, abi.Command{Op: abi.OpNop}) // rings once more
			if err != nil {
				done <- err
				return
			}
			last.Store(idx)
			submitted.Add(1)
		}
		done <- nil
	}()
	var rtt []time.Duration
	for time.Since(start) < runFor {
		t0 := time.Now()
		idx, err := quiet.Submit(ctx, abi.Command{Op: abi.OpNop})
		if err == nil {
			err = quiet.Wait(ctx, idx)
		}
		if err != nil {
			t.Fatal(err)
		}
		rtt = append(rtt, time.Since(t0))
		time.Sleep(100 * time.Microsecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	handled := storm.doorbells.Load()
	if err := ch.Wait(ctx, last.Load()); err != nil {
		t.Fatalf("the storm's last command: %v", err)
	}
	st := storm.Stats()
	if st.Total.Commands != submitted.Load() {
		t.Fatalf("%d of the storm's %d commands completed", st.Total.Commands, submitted.Load())
	}
	// The burst, the rate, one read per mute ending.
	bound := 64 + uint64(el.Seconds()*limit) + uint64(el/ivshmem.MuteFor) + 2
	if handled > bound || st.DoorbellsLimited == 0 {
		t.Fatalf("%d doorbells rung in %v, %d handled (want at most %d at %d/s), %d limited",
			rung.Load(), el, handled, bound, limit, st.DoorbellsLimited)
	}
	slices.Sort(rtt)
	p50 := rtt[len(rtt)/2]
	if p50 >= ivshmem.MuteFor {
		t.Fatalf("the quiet VM's NOP round trips: p50 %v over %d, as long as a mute", p50, len(rtt))
	}
	t.Logf("storm: %d rung in %v, %d handled, %d limited, %d commands; quiet VM: %d NOPs, p50 %v, max %v",
		rung.Load(), el, handled, st.DoorbellsLimited, submitted.Load(), len(rtt), p50, rtt[len(rtt)-1])
}

// TestSpinFindsRecords: with spinning on, records a guest puts in the
// ring without a doorbell soon after one it rang are forwarded by the spin
// (its window grows as the guest keeps coming back just after it ended);
// with spinning off, only doorbells forward them.
func TestSpinFindsRecords(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window time.Duration
	}{{"spinning", 100 * time.Millisecond}, {"off", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			_, dev, _ := stormVM(t, "spin", Config{SpinWindow: tc.window, SpinBudget: spin.NewBudget(1)})
			r := shm.New(dev.Transport().Region())
			l := dev.Layout()
			off := l.ChannelOff(0)
			put := r.Load32(off + abi.ChPut)
			rec := abi.EncodeCommand(abi.Command{Op: abi.OpNop})
			// waitGet waits up to d for the host to complete up to put.
			waitGet := func(d time.Duration) bool {
				deadline := time.Now().Add(d)
				for r.Load32(off+abi.ChGet) != put {
					if time.Now().After(deadline) {
						return false
					}
				}
				return true
			}
			const rounds = 40
			found := 0
			for i := range rounds {
				r.CopyIn(l.RecordOff(0, put), rec[:])
				put++
				r.Store32(off+abi.ChPut, put)
				// Within the window, however late a loaded machine runs the
				// spinning goroutine: what is asserted is that the spin finds
				// records, not how soon.
				if i > 0 && waitGet(20*time.Millisecond) {
					found++
				}
				// The doorbell, as a guest would ring it: it forwards the
				// record if the spin did not and starts the next spin.
				if err := dev.Doorbell(0); err != nil {
					t.Fatal(err)
				}
				if !waitGet(guard) {
					t.Fatalf("record %d not forwarded after its doorbell", i)
				}
			}
			switch {
			case tc.window > 0 && found == 0: // all, on an idle machine; on a loaded one, those its goroutine ran for
				t.Fatalf("the spin found none of %d records put within 20ms of a doorbell", rounds-1)
			case tc.window == 0 && found > 0:
				t.Fatalf("%d records forwarded without a doorbell with spinning off", found)
			}
			t.Logf("%d of %d records found by the spin", found, rounds-1)
		})
	}
}

// guard bounds waits that must end, never a timing assertion.
const guard = 10 * time.Second
