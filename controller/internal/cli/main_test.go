package cli

import (
	"os"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/backend/cuda"
)

// TestMain lets a bench run on the cuda backend start this test binary
// again as its GPU workers and native runner, as sluicectl's hidden
// subcommands do for the real binary.
func TestMain(m *testing.M) { os.Exit(cuda.MainOr(m.Run)) }
