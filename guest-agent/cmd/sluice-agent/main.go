// Command sluice-agent is Sluice's guest agent: it opens the shared region
// of a Sluice endpoint, either as a process guest joining the endpoint's
// ivshmem socket (--endpoint) or inside a VM through the ivshmem PCI device
// (--device), prints its header, and runs the throttle and latency
// workloads. It is a static binary (CGO_ENABLED=0).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd(os.Stdout).ExecuteContext(ctx)
	interrupted := ctx.Err() != nil // before stop, which cancels ctx too
	stop()
	if err != nil {
		if interrupted {
			err = fmt.Errorf("interrupted: %w", err)
		}
		fmt.Fprintf(os.Stderr, "sluice-agent: %v\n", err)
		os.Exit(1)
	}
}
