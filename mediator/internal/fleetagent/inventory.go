package fleetagent

import (
	"fmt"
	"strings"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/mediator/internal/gpuinv"
)

// Inventory is the GPU inventory a host reports to the controller: the GPUs
// a backend drives (declared), each merged with the PCI function sysfs shows
// for it under root (gpuinv.Merge: by address, else by model), and the GPU
// functions that no backend drives, which are not reported: the controller
// would place VMs on them, and sluiced could not run those VMs there.
//
// A reported GPU's model is the declared one (else the PCI function's), its
// memory the declared size (else defaultMemory, as sysfs does not tell it),
// and its PCI address, NUMA node, driver, IOMMU group and SR-IOV state are
// sysfs's; a declared GPU without a PCI function (the sim backend's) has
// none of them.
func Inventory(declared []gpuinv.Declared, root string, defaultMemory int64) (reports []controllerapi.GPUReport, unused []gpuinv.GPU, err error) {
	found, err := gpuinv.Discover(root)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the GPU inventory from sysfs: %w", err)
	}
	m, err := gpuinv.Merge(declared, found)
	if err != nil {
		return nil, nil, fmt.Errorf("merging the declared GPUs with sysfs's: %w", err)
	}
	return Reports(m, defaultMemory), m.Unused, nil
}

// Reports are a merged inventory's declared GPUs as the controller takes
// them, indexed in order.
func Reports(m gpuinv.Merged, defaultMemory int64) []controllerapi.GPUReport {
	out := make([]controllerapi.GPUReport, len(m.Served))
	for i, s := range m.Served {
		r := controllerapi.GPUReport{Index: i, Model: s.Model, MemoryBytes: s.MemoryBytes}
		if s.PCI != nil {
			r = pciReport(i, *s.PCI, defaultMemory)
			if s.Model != "" {
				r.Model = s.Model
			}
			if s.MemoryBytes > 0 {
				r.MemoryBytes = s.MemoryBytes
			}
		}
		if r.MemoryBytes <= 0 {
			r.MemoryBytes = defaultMemory
		}
		out[i] = r
	}
	return out
}

// pciReport is a PCI function's report, with memoryBytes.
func pciReport(index int, g gpuinv.GPU, memoryBytes int64) controllerapi.GPUReport {
	r := controllerapi.GPUReport{Index: index, Model: g.Model, MemoryBytes: memoryBytes, PciAddress: &g.Address,
		NumaNode: g.NUMANode, IommuGroup: g.IOMMUGroup, SriovTotalvfs: g.SRIOVTotalVFs, SriovNumvfs: g.SRIOVNumVFs}
	if g.Driver != "" {
		r.Driver = &g.Driver
	}
	if len(g.VFs) > 0 {
		vfs := make([]controllerapi.PCIVF, len(g.VFs))
		for j, vf := range g.VFs {
			vfs[j] = controllerapi.PCIVF{Address: vf.Address}
			if vf.Driver != "" {
				vfs[j].Driver = &vf.Driver
			}
		}
		r.Vfs = &vfs
	}
	return r
}

// ParseDeclared reads the GPUs an operator declares (sluiced
// --controller-gpus): MODEL:SIZE entries separated by commas, each with an
// optional @PCI_ADDRESS naming the function it is ("H100:80GiB@0000:41:00.0");
// without one, a GPU of a model that sysfs shows once is that one.
func ParseDeclared(s string) ([]gpuinv.Declared, error) {
	var out []gpuinv.Declared
	for i, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		e, addr, hasAddr := strings.Cut(e, "@")
		model, size, ok := strings.Cut(e, ":")
		if !ok || model == "" {
			return nil, fmt.Errorf("GPU %d %q: want MODEL:SIZE[@PCI_ADDRESS], like H100:80GiB", i, e)
		}
		n, err := parseSize(size)
		if err != nil {
			return nil, fmt.Errorf("GPU %d %q: %w", i, e, err)
		}
		d := gpuinv.Declared{Model: model, MemoryBytes: n}
		if hasAddr {
			if d.PCIAddress, err = gpuinv.NormalizeAddress(addr); err != nil {
				return nil, fmt.Errorf("GPU %d: %w", i, err)
			}
		}
		out = append(out, d)
	}
	return out, nil
}
