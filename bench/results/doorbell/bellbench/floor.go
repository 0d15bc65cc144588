package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"time"

	"github.com/sluice-gpu/sluice/guest-agent/workload"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// The answerer's files: the eventfd and the shared page.
const (
	fdBell = 3
	fdPage = 4
)

func floorCmd() *cobra.Command {
	var count, warmup int
	c := &cobra.Command{
		Use: "floor",
		Short: "Raw polling round trip: this process writes an eventfd and spins on shared memory, " +
			"another busy-polls the eventfd and answers with a store (JSON round_trip_ns)",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return ring(count, warmup) },
	}
	c.Flags().IntVar(&count, "count", 20000, "measured round trips")
	c.Flags().IntVar(&warmup, "warmup", 1000, "unmeasured round trips first")
	return c
}

func answerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "answer",
		Short:  "The answering process of floor (started by floor itself)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE:   func(*cobra.Command, []string) error { return answer() },
	}
}

// ring starts the answerer and times count round trips.
func ring(count, warmup int) error {
	if count <= 0 || warmup < 0 {
		return fmt.Errorf("count must be positive and warmup not negative")
	}
	bell, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("creating the eventfd: %w", err)
	}
	page, err := shm.NewMemfd("floor", 4096)
	if err != nil {
		return err
	}
	mem, err := shm.Map(page, 4096)
	if err != nil {
		return err
	}
	r := shm.New(mem)
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary: %w", err)
	}
	cmd := exec.Command(self, "answer")
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{os.NewFile(uintptr(bell), "bell"), os.NewFile(uintptr(page), "page")}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the answerer: %w", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	runtime.LockOSThread()
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	samples := make([]time.Duration, 0, count)
	start := time.Now()
	for i := 1; i <= warmup+count; i++ {
		t0 := time.Now()
		if _, err := unix.Write(bell, one); err != nil {
			return fmt.Errorf("ringing: %w", err)
		}
		for r.Load64(0) != uint64(i) {
		}
		if i > warmup {
			samples = append(samples, time.Since(t0))
		}
	}
	return json.NewEncoder(os.Stdout).Encode(struct {
		Workload  string           `json:"workload"`
		Count     int              `json:"count"`
		ElapsedNs int64            `json:"elapsed_ns"`
		RoundTrip workload.Summary `json:"round_trip_ns"`
	}{"floor", count, int64(time.Since(start)), workload.Summarize(samples)})
}

// answer busy-polls the eventfd and answers each doorbell with the count
// of doorbells seen so far, until its parent goes.
func answer() error {
	mem, err := shm.Map(fdPage, 4096)
	if err != nil {
		return err
	}
	r := shm.New(mem)
	runtime.LockOSThread()
	var buf [8]byte
	var seen uint64
	for idle := 1; ; idle++ {
		_, err := unix.Read(fdBell, buf[:])
		switch {
		case err == nil:
			seen++
			r.Store64(0, seen)
		case err == unix.EAGAIN || err == unix.EINTR:
			if idle%(1<<16) == 0 && os.Getppid() == 1 {
				return nil // orphaned
			}
		default:
			return fmt.Errorf("reading the doorbell: %w", err)
		}
	}
}
