package daemon

import (
	"testing"

	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/internal/gpuinv"
	"github.com/sluice-gpu/sluice/mediator/internal/gpuinv/gpuinvtest"
)

// describedGPU is a backend that describes its GPU as a CUDA backend that
// knew its bus id and memory would.
type describedGPU struct {
	backend.Backend
	name, busID string
	memory      int64
}

func (g describedGPU) DeviceName() string  { return g.name }
func (g describedGPU) DeviceMemory() int64 { return g.memory }
func (g describedGPU) PCIBusID() string    { return g.busID }

// TestDeclaredGPU: the sim backend's GPU is named after the backend, with
// nothing else known, so on the H100 host's recorded tree it gets no PCI
// function and the H100 stays unused; a backend that names its device and
// tells its bus id gets the H100's function.
func TestDeclaredGPU(t *testing.T) {
	found, err := gpuinv.Discover(gpuinvtest.Tree(t, "h100-host.tar"))
	if err != nil {
		t.Fatal(err)
	}
	sim := newDaemon(t, "virtual", t.TempDir()).DeclaredGPU()
	if sim != (gpuinv.Declared{Model: "sim"}) {
		t.Fatalf("sim: %+v", sim)
	}
	m, err := gpuinv.Merge([]gpuinv.Declared{sim}, found)
	if err != nil || m.Served[0].PCI != nil || len(m.Unused) != 1 {
		t.Fatalf("sim on the H100 host: %+v, %v", m, err)
	}

	d := &Daemon{cfg: Config{Backend: "cuda"}, be: describedGPU{name: "NVIDIA H100 80GB HBM3", busID: "00000000:00:06.0", memory: 80 << 30}}
	cuda := d.DeclaredGPU()
	if cuda != (gpuinv.Declared{Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, PCIAddress: "00000000:00:06.0"}) {
		t.Fatalf("cuda: %+v", cuda)
	}
	m, err = gpuinv.Merge([]gpuinv.Declared{cuda}, found)
	if err != nil || m.Served[0].PCI == nil || m.Served[0].PCI.Address != "0000:00:06.0" || len(m.Unused) != 0 {
		t.Fatalf("cuda on the H100 host: %+v, %v", m, err)
	}
	// A backend that names its device but says no more: matched by model.
	d.be = describedGPU{name: "NVIDIA H100 80GB HBM3"}
	if got := d.DeclaredGPU(); got != (gpuinv.Declared{Model: "NVIDIA H100 80GB HBM3"}) {
		t.Fatalf("name only: %+v", got)
	}
}
