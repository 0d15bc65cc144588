package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/transport/pci"
	"github.com/sluice-gpu/sluice/guest-agent/workload"
	"github.com/sluice-gpu/sluice/internal/shm"
)

func guestCmd() *cobra.Command {
	var (
		mode          string
		count, warmup int
	)
	c := &cobra.Command{
		Use:   "guest",
		Short: "In the guest: time --count round trips to the host peer, spinning (poll) or asleep on MSI-X (irq); JSON out",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if mode != "poll" && mode != "irq" {
				return fmt.Errorf("--mode %q: want poll or irq", mode)
			}
			if count <= 0 || warmup < 0 {
				return errors.New("--count must be positive and --warmup not negative")
			}
			return guest(mode, count, warmup)
		},
	}
	c.Flags().StringVar(&mode, "mode", "poll", "poll: spin on the answer; irq: sleep on vector 0's MSI-X eventfd (vfio-pci)")
	c.Flags().IntVar(&count, "count", 5000, "measured round trips")
	c.Flags().IntVar(&warmup, "warmup", 500, "unmeasured round trips first")
	return c
}

// transport opens the device through VFIO where the guest bound it, else
// through sysfs (poll only).
func transport(mode string) (sdk.Transport, *pci.Waking, error) {
	w, err := pci.OpenVFIO(pci.Options{Wait: 10 * time.Second})
	if err == nil {
		return w, w, nil
	}
	if mode == "irq" || !errors.Is(err, pci.ErrNoInterrupts) {
		return nil, nil, err
	}
	t, err := pci.Open(pci.Options{Wait: 10 * time.Second})
	return t, nil, err
}

func guest(mode string, count, warmup int) error {
	t, w, err := transport(mode)
	if err != nil {
		return err
	}
	defer t.Close()
	r := shm.New(t.Region())
	irq := mode == "irq"
	if irq {
		r.Store64(offNotify, 1)
	} else {
		r.Store64(offNotify, 0)
	}
	ctx := context.Background()
	samples := make([]time.Duration, 0, count)
	base := r.Load64(offAnswer)
	start := time.Now()
	for i := uint64(1); i <= uint64(warmup+count); i++ {
		seq := base + i
		t0 := time.Now()
		r.Store64(offSeq, seq)
		if err := t.Doorbell(0, 0); err != nil {
			return err
		}
		for r.Load64(offAnswer) != seq {
			if irq {
				if err := w.WaitVector(ctx, 0); err != nil {
					return err
				}
			}
		}
		if i > uint64(warmup) {
			samples = append(samples, time.Since(t0))
		}
	}
	return json.NewEncoder(os.Stdout).Encode(workload.LatencyResult{Workload: "pingpong-" + mode, Count: count,
		ElapsedNs: int64(time.Since(start)), RoundTrip: workload.Summarize(samples)})
}
