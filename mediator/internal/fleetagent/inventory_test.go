package fleetagent

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/mediator/internal/gpuinv"
	"github.com/sluice-gpu/sluice/mediator/internal/gpuinv/gpuinvtest"
)

func sp(s string) *string { return &s }
func ip(n int) *int       { return &n }

// TestInventoryH100Host: on the H100 host's recorded tree, the cuda
// backend's GPU (named as the driver names it) gets the H100's PCI data and
// keeps its own name and memory; a sim backend's GPU gets none, and the
// H100, which no backend drives, is set apart.
func TestInventoryH100Host(t *testing.T) {
	root := gpuinvtest.Tree(t, "h100-host.tar")
	const h100 = "NVIDIA H100 80GB HBM3"
	reports, unused, err := Inventory([]gpuinv.Declared{{Model: h100, MemoryBytes: 80 << 30}}, root, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	want := []controllerapi.GPUReport{{Index: 0, Model: h100, MemoryBytes: 80 << 30, PciAddress: sp("0000:00:06.0"), Driver: sp("nvidia")}}
	if !reflect.DeepEqual(reports, want) || len(unused) != 0 {
		t.Fatalf("cuda: %+v, unused %+v", reports, unused)
	}

	reports, unused, err = Inventory([]gpuinv.Declared{{Model: "sim"}}, root, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	want = []controllerapi.GPUReport{{Index: 0, Model: "sim", MemoryBytes: 1 << 30}}
	if !reflect.DeepEqual(reports, want) || len(unused) != 1 || unused[0].Address != "0000:00:06.0" {
		t.Fatalf("sim: %+v, unused %+v", reports, unused)
	}
}

// TestInventorySRIOV: the operator's declaration with an address, on the
// synthetic SR-IOV tree (its VFs, NUMA node and IOMMU group reported) and on
// the one recorded from a real SR-IOV GPU (16 VFs).
func TestInventorySRIOV(t *testing.T) {
	declared, err := ParseDeclared("A100:80GiB@41:00.0")
	if err != nil {
		t.Fatal(err)
	}
	reports, unused, err := Inventory(declared, gpuinvtest.Tree(t, "synthetic-sriov.tar"), 1)
	if err != nil {
		t.Fatal(err)
	}
	vfs := []controllerapi.PCIVF{{Address: "0000:41:00.4", Driver: sp("vfio-pci")}, {Address: "0000:41:00.5"}}
	want := []controllerapi.GPUReport{{Index: 0, Model: "A100", MemoryBytes: 80 << 30, PciAddress: sp("0000:41:00.0"),
		NumaNode: ip(1), Driver: sp("nvidia"), IommuGroup: ip(40), SriovTotalvfs: ip(16), SriovNumvfs: ip(2), Vfs: &vfs}}
	if !reflect.DeepEqual(reports, want) {
		t.Fatalf("got %+v\nwant %+v", reports, want)
	}
	if len(unused) != 1 || unused[0].Address != "0000:c1:00.0" {
		t.Fatalf("unused %+v, want the AMD GPU", unused)
	}

	declared, err = ParseDeclared("vGPU host:48GiB@0000:82:00.0")
	if err != nil {
		t.Fatal(err)
	}
	reports, _, err = Inventory(declared, gpuinvtest.Tree(t, "tarook-sriov.tar"), 1)
	if err != nil {
		t.Fatal(err)
	}
	r := reports[0]
	if r.Vfs == nil || len(*r.Vfs) != 16 || *r.SriovNumvfs != 16 || (*r.Vfs)[15].Address != "0000:82:02.3" || *(*r.Vfs)[15].Driver != "nvidia" {
		t.Fatalf("the recorded SR-IOV GPU: %+v", r)
	}
}

func TestInventoryRefusals(t *testing.T) {
	root := gpuinvtest.Tree(t, "h100-host.tar")
	_, _, err := Inventory([]gpuinv.Declared{{Model: "H100", PCIAddress: "0000:41:00.0"}}, root, 1)
	if !errors.Is(err, gpuinv.ErrNotFound) {
		t.Fatalf("an address sysfs does not show: %v", err)
	}
	// A tree without a PCI bus (sysfs not mounted in a container) has no
	// GPUs: a simulated one is reported without PCI data.
	reports, unused, err := Inventory([]gpuinv.Declared{{Model: "sim"}}, t.TempDir(), 1)
	if err != nil || len(reports) != 1 || reports[0].PciAddress != nil || len(unused) != 0 {
		t.Fatalf("no PCI bus: %+v, %+v, %v", reports, unused, err)
	}
	if _, _, err := Inventory(nil, "/dev/null", 1); err == nil {
		t.Fatal("a root that is not a directory: no error")
	}
}

func TestParseDeclared(t *testing.T) {
	got, err := ParseDeclared("H100:80GiB@00000000:41:00.0, sim:1GiB")
	if err != nil {
		t.Fatal(err)
	}
	want := []gpuinv.Declared{{Model: "H100", MemoryBytes: 80 << 30, PCIAddress: "0000:41:00.0"}, {Model: "sim", MemoryBytes: 1 << 30}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v", got)
	}
	for bad, msg := range map[string]string{
		"H100:80GiB@":       "PCI address",
		"H100:80GiB@gpu0":   "PCI address",
		"H100@0000:41:00.0": "want MODEL:SIZE",
		":80GiB":            "want MODEL:SIZE",
		"H100:0@41:00.0":    "positive",
	} {
		if _, err := ParseDeclared(bad); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want %q", bad, err, msg)
		}
	}
	if _, err := ParseGPUs("H100:80GiB@41:00.0"); err == nil {
		t.Error("ParseGPUs dropped an address")
	}
}
