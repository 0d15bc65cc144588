package daemon

import "github.com/sluice-gpu/sluice/mediator/internal/gpuinv"

// Abilities a backend may have to describe the GPU it drives, found by type
// assertion (the cuda backend has all three, from the driver).
type (
	deviceNamer  interface{ DeviceName() string }
	deviceMemory interface{ DeviceMemory() int64 }
	pciBusIDer   interface{ PCIBusID() string }
)

// DeclaredGPU is the GPU the daemon's backend drives, as the host reports
// it (fleetagent.Inventory merges it with sysfs): named by the backend's
// device where it names one (cuda: the driver's name, "NVIDIA H100 80GB
// HBM3", which sysfs's id table matches), else after the backend ("sim",
// "null"), with the memory and PCI address the backend tells (0 and "":
// unknown).
func (d *Daemon) DeclaredGPU() gpuinv.Declared {
	g := gpuinv.Declared{Model: d.cfg.Backend}
	if n, ok := d.be.(deviceNamer); ok && n.DeviceName() != "" {
		g.Model = n.DeviceName()
	}
	if m, ok := d.be.(deviceMemory); ok && m.DeviceMemory() > 0 {
		g.MemoryBytes = m.DeviceMemory()
	}
	if p, ok := d.be.(pciBusIDer); ok {
		g.PCIAddress = p.PCIBusID()
	}
	return g
}
