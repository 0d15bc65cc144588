package gpuinv

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/internal/gpuinv/gpuinvtest"
)

// extract unpacks testdata/name into a temporary directory: a sysfs root.
func extract(t *testing.T, name string) string { return gpuinvtest.Tree(t, name) }

func ip(n int) *int { return &n }

func TestRecordedTrees(t *testing.T) {
	for _, c := range []struct {
		tree string
		want []GPU
	}{
		{"h100-guest.tar", []GPU{{
			Address: "0000:00:06.0", Vendor: 0x10de, Device: 0x2330, Class: 0x030200,
			Model: "NVIDIA H100 80GB HBM3", NUMANode: nil, Driver: "nvidia", IOMMUGroup: nil,
			SRIOVTotalVFs: nil, SRIOVNumVFs: nil, VFs: nil,
		}}},
		// Recorded on the GPU machine itself (record.sh /sys, 2026-11-24): the
		// H100 passed through to a KVM guest, among its six other functions.
		{"h100-host.tar", []GPU{{
			Address: "0000:00:06.0", Vendor: 0x10de, Device: 0x2330, Class: 0x030200,
			Model: "NVIDIA H100 80GB HBM3", NUMANode: nil, Driver: "nvidia", IOMMUGroup: nil,
			SRIOVTotalVFs: nil, SRIOVNumVFs: nil, VFs: nil,
		}}},
		// The build machine has no GPU: an Intel host bridge (class 0x0600) and virtio functions.
		{"build-vm.tar", nil},
		{"synthetic-sriov.tar", []GPU{
			{
				Address: "0000:41:00.0", Vendor: 0x10de, Device: 0x20b2, Class: 0x030200,
				Model: "NVIDIA A100-SXM4-80GB", NUMANode: ip(1), Driver: "nvidia", IOMMUGroup: ip(40),
				SRIOVTotalVFs: ip(16), SRIOVNumVFs: ip(2),
				VFs: []VF{{Address: "0000:41:00.4", Driver: "vfio-pci"}, {Address: "0000:41:00.5", Driver: ""}},
			},
			{
				Address: "0000:c1:00.0", Vendor: 0x1002, Device: 0x740f, Class: 0x038000,
				Model: "0x1002:0x740f", NUMANode: ip(0), Driver: "", IOMMUGroup: ip(0),
				SRIOVTotalVFs: ip(4), SRIOVNumVFs: ip(0), VFs: nil,
			},
		}},
		// The virtfn links recorded on a real SR-IOV GPU (testdata/README.md):
		// 16 VFs, read in numeric order (ls listed virtfn10 before virtfn2),
		// none of them listed as a GPU of its own.
		{"tarook-sriov.tar", []GPU{{
			Address: "0000:82:00.0", Vendor: 0x10de, Device: 0x0000, Class: 0x030200,
			Model: "0x10de:0x0000", NUMANode: nil, Driver: "nvidia", IOMMUGroup: nil,
			SRIOVTotalVFs: ip(16), SRIOVNumVFs: ip(16), VFs: tarookVFs(),
		}}},
	} {
		t.Run(c.tree, func(t *testing.T) {
			got, err := Discover(extract(t, c.tree))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got\n%s\nwant\n%s", dump(got), dump(c.want))
			}
		})
	}
}

// tarookVFs are the 16 VFs of tarook-sriov.tar, as listed there.
func tarookVFs() []VF {
	var vfs []VF
	for _, a := range strings.Fields(`82:00.4 82:00.5 82:00.6 82:00.7 82:01.0 82:01.1 82:01.2 82:01.3
		82:01.4 82:01.5 82:01.6 82:01.7 82:02.0 82:02.1 82:02.2 82:02.3`) {
		vfs = append(vfs, VF{Address: "0000:" + a, Driver: "nvidia"})
	}
	return vfs
}

func dump(gs []GPU) string {
	var b strings.Builder
	opt := func(p *int) string {
		if p == nil {
			return "absent"
		}
		return fmt.Sprint(*p)
	}
	for _, g := range gs {
		fmt.Fprintf(&b, "%s %#x:%#x class %#06x %q numa=%s driver=%q iommu=%s total=%s num=%s vfs=%+v\n",
			g.Address, g.Vendor, g.Device, g.Class, g.Model, opt(g.NUMANode), g.Driver, opt(g.IOMMUGroup),
			opt(g.SRIOVTotalVFs), opt(g.SRIOVNumVFs), g.VFs)
	}
	return b.String()
}

// TestErrorsNameTheFile: a malformed attribute is an error naming its file;
// an oversized one too.
func TestErrorsNameTheFile(t *testing.T) {
	for _, c := range []struct{ file, content, want string }{
		{"numa_node", "one\n", `numa_node: "one": want a decimal number`},
		{"sriov_totalvfs", "x\n", `sriov_totalvfs: "x": want a decimal number`},
		{"device", "2330\n", `device: "2330": want a 0x-prefixed hexadecimal number`},
		{"device", "0x12345\n", `device: "0x12345": want a 16-bit hexadecimal number`},
		{"numa_node", strings.Repeat("1", MaxAttrSize+1), "numa_node: longer than 4096 bytes"},
	} {
		root := extract(t, "h100-guest.tar")
		p := filepath.Join(root, "devices", "pci0000:00", "0000:00:06.0", c.file)
		if err := os.WriteFile(p, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Discover(root)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), root) {
			t.Errorf("%s %q: got %v, want an error naming the file and %q", c.file, c.content, err, c.want)
		}
	}
}

func TestNoPCIBus(t *testing.T) {
	got, err := Discover(t.TempDir())
	if err != nil || got != nil {
		t.Errorf("got %v, %v; want none, nil", got, err)
	}
}

func TestModelName(t *testing.T) {
	for _, c := range []struct {
		v, d uint16
		want string
	}{
		{0x10de, 0x2330, "NVIDIA H100 80GB HBM3"},
		{0x10de, 0x2335, "NVIDIA H200"},
		{0x10de, 0x20b0, "NVIDIA A100-SXM4-40GB"},
		{0x10de, 0x1234, "0x10de:0x1234"},
		{0x1002, 0x2330, "0x1002:0x2330"},
	} {
		if got := ModelName(c.v, c.d); got != c.want {
			t.Errorf("ModelName(%#x, %#x) = %q, want %q", c.v, c.d, got, c.want)
		}
	}
}
