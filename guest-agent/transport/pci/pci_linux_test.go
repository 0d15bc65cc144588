package pci_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/transport/pci"
)

type fakeDev struct {
	addr           string
	vendor, device string
	bar2           int  // bytes; 0: no resource2 file
	symlink        bool // live under devices/ and link from bus/pci/devices, as sysfs does
}

// fakeSysfs builds a sysfs tree of regular files; it returns the root.
func fakeSysfs(t *testing.T, devs ...fakeDev) string {
	t.Helper()
	root := t.TempDir()
	bus := filepath.Join(root, "bus", "pci", "devices")
	must(t, os.MkdirAll(bus, 0o755))
	for _, d := range devs {
		dir := filepath.Join(bus, d.addr)
		if d.symlink {
			dir = filepath.Join(root, "devices", "pci0000:00", d.addr)
			must(t, os.MkdirAll(filepath.Dir(dir), 0o755))
			must(t, os.Symlink(dir, filepath.Join(bus, d.addr)))
		}
		must(t, os.MkdirAll(dir, 0o755))
		write(t, dir, "vendor", []byte(d.vendor+"\n"))
		write(t, dir, "device", []byte(d.device+"\n"))
		write(t, dir, "enable", []byte("0\n"))
		bar0 := make([]byte, 256)
		binary.LittleEndian.PutUint32(bar0[pci.RegIVPosition:], 3)
		write(t, dir, "resource0", bar0)
		if d.bar2 > 0 {
			write(t, dir, "resource2", region(t, d.bar2))
		}
	}
	return root
}

func region(t *testing.T, size int) []byte {
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: uint64(size), Channels: 2, RingEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	abi.EncodeHeader(b, abi.Header{VersionMajor: abi.VersionMajor, HostPeerID: 1, Layout: l})
	return b
}

func write(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ivshmem(addr string) fakeDev {
	return fakeDev{addr: addr, vendor: "0x1af4", device: "0x1110", bar2: abi.MinRegionSize}
}

func TestFind(t *testing.T) {
	root := fakeSysfs(t,
		ivshmem("0000:00:05.0"),
		fakeDev{addr: "0000:00:01.0", vendor: "0x8086", device: "0x1110"},
		fakeDev{addr: "0000:00:02.0", vendor: "0x1af4", device: "0x1000"},
		fakeDev{addr: "0000:00:03.0", vendor: "garbage", device: "0x1110"},
		func() fakeDev { d := ivshmem("0000:00:04.0"); d.symlink = true; return d }(),
	)
	devs, err := pci.Find(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].Address != "0000:00:04.0" || devs[1].Address != "0000:00:05.0" {
		t.Fatalf("Find = %+v, want 00:04.0 and 00:05.0 in order", devs)
	}
	if _, err := pci.Find(t.TempDir()); err == nil {
		t.Error("Find without bus/pci/devices succeeded")
	}
}

func TestSelect(t *testing.T) {
	devs := []pci.Device{{Address: "0000:00:04.0"}, {Address: "0000:00:05.0"}}
	tests := []struct {
		name string
		devs []pci.Device
		opts pci.Options
		want string
	}{
		{"first", devs, pci.Options{}, "0000:00:04.0"},
		{"index", devs, pci.Options{Index: 1}, "0000:00:05.0"},
		{"address", devs, pci.Options{Address: "0000:00:05.0", Index: 0}, "0000:00:05.0"},
		{"short address", devs, pci.Options{Address: "00:05.0"}, "0000:00:05.0"},
		{"no address", devs, pci.Options{Address: "00:06.0"}, ""},
		{"index past end", devs, pci.Options{Index: 2}, ""},
		{"negative index", devs, pci.Options{Index: -1}, ""},
		{"none", nil, pci.Options{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := pci.Select(tt.devs, tt.opts)
			if tt.want == "" {
				if !errors.Is(err, pci.ErrNotFound) {
					t.Fatalf("Select = %+v, %v; want ErrNotFound", d, err)
				}
				return
			}
			if err != nil || d.Address != tt.want {
				t.Fatalf("Select = %+v, %v; want %s", d, err, tt.want)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	root := fakeSysfs(t, ivshmem("0000:00:04.0"), ivshmem("0000:00:05.0"))
	tr, err := pci.Open(pci.Options{SysfsRoot: root, Address: "00:05.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	dir := filepath.Join(root, "bus", "pci", "devices", "0000:00:05.0")
	if b, _ := os.ReadFile(filepath.Join(dir, "enable")); string(b[:1]) != "1" {
		t.Errorf("enable holds %q, want 1", b)
	}
	if other, _ := os.ReadFile(filepath.Join(root, "bus", "pci", "devices", "0000:00:04.0", "enable")); string(other[:1]) != "0" {
		t.Errorf("the unselected device was enabled")
	}
	if len(tr.Region()) != abi.MinRegionSize || tr.ID() != 3 {
		t.Errorf("region of %d bytes, id %d; want %d, 3", len(tr.Region()), tr.ID(), abi.MinRegionSize)
	}
	d, err := sdk.Open(tr)
	if err != nil {
		t.Fatalf("header through BAR2: %v", err)
	}
	if err := d.Doorbell(2); err != nil {
		t.Fatal(err)
	}
	bar0, err := os.ReadFile(filepath.Join(dir, "resource0"))
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(bar0[pci.RegDoorbell:]); got != 1<<16|2 {
		t.Errorf("doorbell register %#x, want %#x", got, 1<<16|2)
	}
	if err := tr.Doorbell(1, 256); err == nil {
		t.Error("vector 256 accepted: QEMU would ring vector 0")
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := tr.Doorbell(1, 0); err == nil {
		t.Error("doorbell after Close succeeded")
	}
}

func TestOpenFailures(t *testing.T) {
	t.Run("no device", func(t *testing.T) {
		root := fakeSysfs(t, fakeDev{addr: "0000:00:01.0", vendor: "0x8086", device: "0x1234"})
		if _, err := pci.Open(pci.Options{SysfsRoot: root}); !errors.Is(err, pci.ErrNotFound) {
			t.Fatalf("Open: %v, want ErrNotFound", err)
		}
	})
	t.Run("no BAR2", func(t *testing.T) {
		d := ivshmem("0000:00:04.0")
		d.bar2 = 0
		root := fakeSysfs(t, d)
		if _, err := pci.Open(pci.Options{SysfsRoot: root}); err == nil {
			t.Fatal("Open without resource2 succeeded")
		}
	})
}

func TestParseResourceSize(t *testing.T) {
	table := "0x00000000fe000000 0x00000000fe0000ff 0x0000000000040200\n" +
		"0x00000000fe001000 0x00000000fe001fff 0x0000000000040200\n" +
		"0x0000000800000000 0x00000008003fffff 0x000000000014220c\n" +
		"0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
	tests := []struct {
		n    int
		want int64
	}{{0, 256}, {1, 4096}, {2, 4 << 20}, {3, -1}, {7, -1}, {-1, -1}}
	for _, tt := range tests {
		got, err := pci.ParseResourceSize(table, tt.n)
		if tt.want < 0 {
			if err == nil {
				t.Errorf("resource %d: size %d, want an error", tt.n, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("resource %d: %d, %v; want %d", tt.n, got, err, tt.want)
		}
	}
}

func FuzzParseResourceSize(f *testing.F) {
	f.Add("0x00000000fe000000 0x00000000fe0000ff 0x0000000000040200\n", 0)
	f.Add("0x1 0x0 0x0", 0)
	f.Add("", 3)
	f.Fuzz(func(t *testing.T, table string, n int) {
		size, err := pci.ParseResourceSize(table, n)
		if err == nil && size <= 0 {
			t.Fatalf("size %d without an error", size)
		}
	})
}

// TestOpenWaitsForAHotPluggedDevice: a device that shows in sysfs only a
// while after Open starts looking (a hot-plug the guest's kernel has not
// added yet) is opened within Options.Wait; without a wait, or past it,
// Open says none is there.
func TestOpenWaitsForAHotPluggedDevice(t *testing.T) {
	root := fakeSysfs(t)
	if _, err := pci.Open(pci.Options{SysfsRoot: root}); !errors.Is(err, pci.ErrNotFound) {
		t.Fatalf("no device, no wait: %v, want ErrNotFound", err)
	}
	start := time.Now()
	if _, err := pci.Open(pci.Options{SysfsRoot: root, Wait: 150 * time.Millisecond}); !errors.Is(err, pci.ErrNotFound) || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("no device in 150ms: %v after %v, want ErrNotFound after the wait", err, time.Since(start))
	}
	// The device appears 200 ms into a 5 s wait (built elsewhere, moved in
	// whole, as the kernel adds a device).
	staged := fakeSysfs(t, ivshmem("0000:00:05.0"))
	go func() {
		time.Sleep(200 * time.Millisecond)
		os.Rename(filepath.Join(staged, "bus", "pci", "devices", "0000:00:05.0"), filepath.Join(root, "bus", "pci", "devices", "0000:00:05.0"))
	}()
	tr, err := pci.Open(pci.Options{SysfsRoot: root, Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("a device that appears within the wait: %v", err)
	}
	tr.Close()
}
