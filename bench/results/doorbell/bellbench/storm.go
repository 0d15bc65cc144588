package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
	"github.com/spf13/cobra"
)

// hostPeer is the mediator's peer id on every Sluice endpoint.
const hostPeer = 0

// guestCmd is a command that joins a VM's endpoint (--endpoint) as a guest
// and runs for --duration.
func guestCmd(use, short string, d time.Duration, run func(cl *ivshmem.Client, d time.Duration) error) *cobra.Command {
	var endpoint string
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cl, err := ivshmem.Dial(ctx, endpoint, 0)
			if err != nil {
				return err
			}
			defer cl.Close()
			return run(cl, d)
		},
	}
	c.Flags().StringVar(&endpoint, "endpoint", "", "the VM's ivshmem socket")
	c.Flags().DurationVar(&d, "duration", d, "how long to run")
	_ = c.MarkFlagRequired("endpoint")
	return c
}

func stormCmd() *cobra.Command {
	var vector int
	c := guestCmd("storm", "Ring one vector of a VM's endpoint as fast as possible for --duration (JSON: doorbells, per_second)",
		5*time.Second, func(cl *ivshmem.Client, d time.Duration) error {
			var n uint64
			start := time.Now()
			for time.Since(start) < d {
				for range 256 {
					if err := cl.Notify(hostPeer, vector); err != nil {
						return fmt.Errorf("ringing: %w", err)
					}
				}
				n += 256
			}
			el := time.Since(start)
			return json.NewEncoder(os.Stdout).Encode(map[string]any{
				"workload": "storm", "doorbells": n, "elapsed_ns": int64(el), "per_second": float64(n) / el.Seconds()})
		})
	c.Flags().IntVar(&vector, "vector", 0, "the vector to ring (a channel's index)")
	return c
}

func idleCmd() *cobra.Command {
	return guestCmd("idle", "Join a VM's endpoint as a guest and do nothing for --duration",
		10*time.Second, func(cl *ivshmem.Client, d time.Duration) error {
			select {
			case <-time.After(d):
				return nil
			case <-cl.Done():
				return fmt.Errorf("the endpoint went away: %w", cl.Err())
			}
		})
}
