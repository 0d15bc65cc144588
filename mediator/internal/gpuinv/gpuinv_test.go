package gpuinv

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// extract unpacks testdata/name into a temporary directory: a sysfs root.
func extract(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, root) {
			t.Fatalf("%s: %s leaves the tree", name, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, b, 0o644)
			}
		default:
			t.Fatalf("%s: %s: unexpected type %c", name, h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

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
