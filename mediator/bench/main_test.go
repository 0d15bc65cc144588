package bench

import (
	"os"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/backend/cuda"
)

// TestMain lets the cuda backend start this test binary again as its GPU
// workers and native runner (the GPU runs' tests).
func TestMain(m *testing.M) { os.Exit(cuda.MainOr(m.Run)) }
