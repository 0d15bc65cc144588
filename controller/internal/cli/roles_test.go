package cli

import (
	"testing"

	"github.com/sluice-gpu/sluice/mediator/backend/cuda"
)

// TestCUDARolesRegistered: bench on the cuda backend starts sluicectl again
// as "sluicectl cuda-worker" and "sluicectl cuda-native"; both must reach
// the hidden role commands, not an unknown-command error.
func TestCUDARolesRegistered(t *testing.T) {
	root := newRootCommand(&app{opts: Options{Getenv: func(string) string { return "" }}})
	for _, name := range []string{cuda.WorkerCommand, cuda.NativeCommand} {
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd.Name() != name || !cmd.Hidden {
			t.Errorf("%s: found %q (hidden %v), %v", name, cmd.Name(), cmd.Hidden, err)
		}
	}
}
