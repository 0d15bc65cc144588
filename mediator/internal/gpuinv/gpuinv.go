// Package gpuinv reads a host's GPU inventory from sysfs: the display and 3D
// controller PCI functions (class 0x03xxxx) of NVIDIA, AMD and Intel, with
// their PCI address, ids, a model name where the id is known, NUMA node,
// bound driver, IOMMU group, SR-IOV totals and virtual functions.
//
// It only reads: small attribute files (each read bounded by MaxAttrSize)
// and symbolic links (driver, iommu_group, virtfn*, physfn), and never the
// config space or the BARs. Fields that sysfs does not show are absent (nil
// or ""), never zero: a function without sriov_totalvfs is not an SR-IOV
// physical function, which is not the same as one with 0 VFs.
//
// Device memory is not read: for NVIDIA, sysfs does not tell it, and the
// largest prefetchable BAR (BAR1) is an aperture whose size is set by the
// board and the hypervisor (an H100 80GB's BAR1 is 128 GiB on bare metal,
// and smaller or larger under passthrough), not the memory. The operator
// declares it (sluiced --controller-gpu-memory, or --controller-gpus).
//
// Merge pairs the GPUs the daemon's backend drives (declared: a name, a
// memory size, a PCI address where the backend knows it) with the functions
// found here: the inventory a host reports is the declared GPUs with their
// PCI data, and the functions that no backend drives are set apart.
package gpuinv

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DefaultRoot is where sysfs is mounted.
const DefaultRoot = "/sys"

// MaxAttrSize bounds every attribute file read: sysfs attributes are at
// most a page, and the ones read here are a line.
const MaxAttrSize = 4096

// PCI vendor ids whose display controllers are listed.
const (
	VendorNVIDIA = 0x10de
	VendorAMD    = 0x1002
	VendorIntel  = 0x8086
)

// GPU is one GPU's PCI function, as sysfs shows it.
type GPU struct {
	Address    string // PCI address, DDDD:BB:DD.F
	Vendor     uint16
	Device     uint16
	Class      uint32 // 0x03xxxx
	Model      string // from the id table, else "0xVVVV:0xDDDD"
	NUMANode   *int   // nil: not shown, or -1 (no NUMA information)
	Driver     string // the bound driver; "": none
	IOMMUGroup *int   // nil: no iommu_group link (no IOMMU, or not enabled)
	// SR-IOV: nil when the files do not exist (not an SR-IOV physical
	// function), which is not 0.
	SRIOVTotalVFs *int
	SRIOVNumVFs   *int
	VFs           []VF // the enabled virtual functions (virtfn*), in order
}

// VF is one virtual function of an SR-IOV physical function.
type VF struct {
	Address string
	Driver  string // "": none
}

// nvidiaModels names common NVIDIA data-centre device ids.
var nvidiaModels = map[uint16]string{
	0x1eb8: "NVIDIA Tesla T4",
	0x20b0: "NVIDIA A100-SXM4-40GB",
	0x20b2: "NVIDIA A100-SXM4-80GB",
	0x20b5: "NVIDIA A100 80GB PCIe",
	0x20f1: "NVIDIA A100-PCIE-40GB",
	0x26b5: "NVIDIA L40",
	0x26b9: "NVIDIA L40S",
	0x27b8: "NVIDIA L4",
	0x2330: "NVIDIA H100 80GB HBM3",
	0x2331: "NVIDIA H100 PCIe",
	0x2335: "NVIDIA H200",
}

// ModelName names a vendor and device id: the table's name where known,
// else "0xVVVV:0xDDDD".
func ModelName(vendor, device uint16) string {
	if vendor == VendorNVIDIA {
		if n, ok := nvidiaModels[device]; ok {
			return n
		}
	}
	return fmt.Sprintf("0x%04x:0x%04x", vendor, device)
}

// Discover lists the GPUs under root (a sysfs mount; "" is DefaultRoot),
// sorted by PCI address. Virtual functions (a physfn link) are not listed
// on their own: they appear in their physical function's VFs. A tree
// without bus/pci/devices has no GPUs.
func Discover(root string) ([]GPU, error) {
	if root == "" {
		root = DefaultRoot
	}
	dir := filepath.Join(root, "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing PCI functions: %w", err)
	}
	var out []GPU
	for _, e := range entries {
		g, ok, err := readFunction(filepath.Join(dir, e.Name()), e.Name())
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out, nil
}

func readFunction(dir, addr string) (GPU, bool, error) {
	g := GPU{Address: addr}
	class, err := readHex(filepath.Join(dir, "class"), 32)
	if err != nil {
		return g, false, err
	}
	g.Class = uint32(class)
	if g.Class>>16 != 0x03 {
		return g, false, nil
	}
	v, err := readHex(filepath.Join(dir, "vendor"), 16)
	if err != nil {
		return g, false, err
	}
	g.Vendor = uint16(v)
	if g.Vendor != VendorNVIDIA && g.Vendor != VendorAMD && g.Vendor != VendorIntel {
		return g, false, nil
	}
	if _, err := os.Lstat(filepath.Join(dir, "physfn")); err == nil {
		return g, false, nil // a VF: listed under its PF
	}
	d, err := readHex(filepath.Join(dir, "device"), 16)
	if err != nil {
		return g, false, err
	}
	g.Device = uint16(d)
	g.Model = ModelName(g.Vendor, g.Device)
	if g.NUMANode, err = readOptInt(filepath.Join(dir, "numa_node")); err != nil {
		return g, false, err
	}
	if g.NUMANode != nil && *g.NUMANode < 0 {
		g.NUMANode = nil
	}
	if g.Driver, err = linkBase(filepath.Join(dir, "driver")); err != nil {
		return g, false, err
	}
	grp, err := linkBase(filepath.Join(dir, "iommu_group"))
	if err != nil {
		return g, false, err
	}
	if grp != "" {
		n, err := strconv.Atoi(grp)
		if err != nil || n < 0 {
			return g, false, fmt.Errorf("%s: group %q: want a number", filepath.Join(dir, "iommu_group"), grp)
		}
		g.IOMMUGroup = &n
	}
	if g.SRIOVTotalVFs, err = readOptInt(filepath.Join(dir, "sriov_totalvfs")); err != nil {
		return g, false, err
	}
	if g.SRIOVNumVFs, err = readOptInt(filepath.Join(dir, "sriov_numvfs")); err != nil {
		return g, false, err
	}
	if g.VFs, err = readVFs(dir); err != nil {
		return g, false, err
	}
	return g, true, nil
}

// readVFs reads the virtfnN links, ordered by N.
func readVFs(dir string) ([]VF, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	type numbered struct {
		n    int
		name string
	}
	var links []numbered
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "virtfn")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s: want virtfnN", filepath.Join(dir, e.Name()))
		}
		links = append(links, numbered{n, e.Name()})
	}
	sort.Slice(links, func(i, j int) bool { return links[i].n < links[j].n })
	var out []VF
	for _, l := range links {
		p := filepath.Join(dir, l.name)
		addr, err := linkBase(p)
		if err != nil {
			return nil, err
		}
		drv, err := linkBase(filepath.Join(p, "driver"))
		if err != nil {
			return nil, err
		}
		out = append(out, VF{Address: addr, Driver: drv})
	}
	return out, nil
}

// readAttr reads a small attribute file, trimmed; at most MaxAttrSize bytes.
func readAttr(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, unwrapPath(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxAttrSize+1))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	if len(b) > MaxAttrSize {
		return "", fmt.Errorf("%s: longer than %d bytes", path, MaxAttrSize)
	}
	return strings.TrimSpace(string(b)), nil
}

// readHex reads a "0x..." attribute (vendor, device, class).
func readHex(path string, bits int) (uint64, error) {
	s, err := readAttr(path)
	if err != nil {
		return 0, err
	}
	h, ok := strings.CutPrefix(s, "0x")
	if !ok {
		return 0, fmt.Errorf("%s: %q: want a 0x-prefixed hexadecimal number", path, s)
	}
	n, err := strconv.ParseUint(h, 16, bits)
	if err != nil {
		return 0, fmt.Errorf("%s: %q: want a %d-bit hexadecimal number", path, s, bits)
	}
	return n, nil
}

// readOptInt reads a decimal attribute; nil when the file does not exist.
func readOptInt(path string) (*int, error) {
	s, err := readAttr(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %q: want a decimal number", path, s)
	}
	return &n, nil
}

// linkBase is the last element of a symbolic link's target; "" when there
// is no link.
func linkBase(path string) (string, error) {
	t, err := os.Readlink(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading link %s: %w", path, unwrapPath(err))
	}
	b := filepath.Base(t)
	if b == "." || b == ".." || b == string(filepath.Separator) {
		return "", fmt.Errorf("link %s: target %q has no name", path, t)
	}
	return b, nil
}

// unwrapPath drops a *fs.PathError's path, which the caller names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
