// Command sluicectl is the operator command line of Sluice; the commands
// live in controller/internal/cli. Its version is set with
// -ldflags "-X github.com/sluice-gpu/sluice/controller/internal/cli.Version=...".
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-gpu/sluice/controller/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.Options{Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
