package fleetagent

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sluice-gpu/sluice/api/controllerapi"
)

func TestParseGPUs(t *testing.T) {
	g, err := ParseGPUs("H100:80GiB, A10:24576MiB,sim:1024")
	if err != nil {
		t.Fatal(err)
	}
	if len(g) != 3 || g[0].Model != "H100" || g[0].MemoryBytes != 80<<30 || g[1].Index != 1 || g[1].MemoryBytes != 24<<30 || g[2].MemoryBytes != 1024 {
		t.Fatalf("%+v", g)
	}
	for _, bad := range []string{"", "H100", ":1GiB", "H100:0", "H100:-1GiB", "H100:lots", "H100:99999999999TiB", "a:1GiB,"} {
		if _, err := ParseGPUs(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestDiscoverGPUs: the H100 guest's function (bench/results/h100-host/sysfs)
// as the agent reports it: memory as the operator set it, NUMA node, IOMMU
// group and SR-IOV absent.
func TestDiscoverGPUs(t *testing.T) {
	root := t.TempDir()
	dev := filepath.Join(root, "devices", "pci0000:00", "0000:00:06.0")
	if err := os.MkdirAll(filepath.Join(root, "bus", "pci", "devices"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"vendor": "0x10de", "device": "0x2330", "class": "0x030200", "numa_node": "-1"} {
		if err := os.WriteFile(filepath.Join(dev, f), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../devices/pci0000:00/0000:00:06.0", filepath.Join(root, "bus", "pci", "devices", "0000:00:06.0")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../bus/pci/drivers/nvidia", filepath.Join(dev, "driver")); err != nil {
		t.Fatal(err)
	}
	got, err := DiscoverGPUs(root, 80<<30)
	if err != nil {
		t.Fatal(err)
	}
	addr, drv := "0000:00:06.0", "nvidia"
	want := []controllerapi.GPUReport{{Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, PciAddress: &addr, Driver: &drv}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got, err := DiscoverGPUs(t.TempDir(), 1); err != nil || len(got) != 0 {
		t.Fatalf("an empty tree: %+v, %v", got, err)
	}
}
