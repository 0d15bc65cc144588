package cli

import (
	"os"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/backend/cuda"
)

// TestMain lets a bench run on the cuda backend start this test binary
// again as its GPU workers and native runner, as sluicectl's hidden
// subcommands do for the real binary.
func TestMain(m *testing.M) {
	if code, ok := cuda.Dispatch(os.Args[1:]); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}
