package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"github.com/sluice-gpu/sluice/guest-agent/workload"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// yieldCmd times what a spinning loop pays for a runtime.Gosched, the
// yield the doorbell goroutine and the SDK's waiter made every few looks:
// a goroutine busy for --every between yields (as a spin's looks are),
// the yields' durations, and how many resumed on another CPU.
func yieldCmd() *cobra.Command {
	var (
		count int
		every time.Duration
	)
	c := &cobra.Command{
		Use: "yield",
		Short: "Time runtime.Gosched in a goroutine that spins --every between yields " +
			"(JSON: gosched_ns, the share that resumed on another CPU)",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if count <= 0 || every < 0 {
				return fmt.Errorf("count must be positive and every not negative")
			}
			return yield(count, every)
		},
	}
	c.Flags().IntVar(&count, "count", 20000, "yields timed")
	c.Flags().DurationVar(&every, "every", time.Microsecond, "busy time between yields")
	return c
}

func yield(count int, every time.Duration) error {
	samples := make([]time.Duration, 0, count)
	moved := 0
	for range count {
		for t := time.Now(); time.Since(t) < every; {
		}
		before := cpu()
		t0 := time.Now()
		runtime.Gosched()
		samples = append(samples, time.Since(t0))
		if cpu() != before {
			moved++
		}
	}
	return json.NewEncoder(os.Stdout).Encode(struct {
		Workload   string           `json:"workload"`
		Procs      int              `json:"gomaxprocs"`
		Count      int              `json:"count"`
		EveryNs    int64            `json:"every_ns"`
		Gosched    workload.Summary `json:"gosched_ns"`
		MovedShare float64          `json:"moved_cpu_share"`
	}{"yield", runtime.GOMAXPROCS(0), count, int64(every), workload.Summarize(samples), float64(moved) / float64(count)})
}

// cpu is the CPU the calling thread runs on (getcpu(2)).
func cpu() int {
	var c uint32
	_, _, _ = unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&c)), 0, 0)
	return int(c)
}
