// Command bellbench measures the doorbell path's bounds and loads it: floor
// times the raw polling round trip between two processes (the lower bound
// of a doorbell and its answer), storm rings a VM's doorbell as fast as one
// process can, idle holds a guest connection that does nothing, yield
// times a spinning goroutine's runtime.Gosched.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

var version = "dev"

func main() {
	root := &cobra.Command{
		Use:           "bellbench",
		Short:         "Doorbell path bounds and loads: floor, storm, idle",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("bellbench {{.Version}}\n")
	root.AddCommand(floorCmd(), answerCmd(), stormCmd(), idleCmd(), yieldCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "bellbench:", err)
		os.Exit(1)
	}
}
