package pci_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-gpu/sluice/guest-agent/transport/pci"
)

// bindTo links dev's driver to a fake driver directory named name, with an
// unbind file, as sysfs does for a bound device.
func bindTo(t *testing.T, root, addr, name string) string {
	t.Helper()
	drv := filepath.Join(root, "bus", "pci", "drivers", name)
	must(t, os.MkdirAll(drv, 0o755))
	write(t, drv, "unbind", nil)
	must(t, os.Symlink(drv, filepath.Join(root, "bus", "pci", "devices", addr, "driver")))
	return drv
}

func TestBindVFIO(t *testing.T) {
	read := func(path string) string {
		b, _ := os.ReadFile(path)
		return string(b)
	}
	t.Run("unbound", func(t *testing.T) {
		root := fakeSysfs(t, ivshmem("0000:00:04.0"))
		write(t, filepath.Join(root, "bus", "pci"), "drivers_probe", nil)
		dev := pci.Device{Address: "0000:00:04.0", Path: filepath.Join(root, "bus", "pci", "devices", "0000:00:04.0")}
		write(t, dev.Path, "driver_override", nil)
		if err := pci.BindVFIO(root, dev); err != nil {
			t.Fatal(err)
		}
		if got := read(filepath.Join(dev.Path, "driver_override")); got != pci.VFIODriver {
			t.Errorf("driver_override %q, want %s", got, pci.VFIODriver)
		}
		if got := read(filepath.Join(root, "bus", "pci", "drivers_probe")); got != dev.Address {
			t.Errorf("drivers_probe got %q, want the address", got)
		}
	})
	t.Run("bound to another driver", func(t *testing.T) {
		root := fakeSysfs(t, ivshmem("0000:00:04.0"))
		write(t, filepath.Join(root, "bus", "pci"), "drivers_probe", nil)
		dev := pci.Device{Address: "0000:00:04.0", Path: filepath.Join(root, "bus", "pci", "devices", "0000:00:04.0")}
		write(t, dev.Path, "driver_override", nil)
		other := bindTo(t, root, dev.Address, "virtio-pci")
		if err := pci.BindVFIO(root, dev); err != nil {
			t.Fatal(err)
		}
		if got := read(filepath.Join(other, "unbind")); got != dev.Address {
			t.Errorf("unbind got %q, want the address", got)
		}
	})
	t.Run("bound to vfio-pci", func(t *testing.T) {
		root := fakeSysfs(t, ivshmem("0000:00:04.0"))
		dev := pci.Device{Address: "0000:00:04.0", Path: filepath.Join(root, "bus", "pci", "devices", "0000:00:04.0")}
		vfio := bindTo(t, root, dev.Address, pci.VFIODriver)
		// No driver_override or drivers_probe file: writing either fails.
		if err := pci.BindVFIO(root, dev); err != nil {
			t.Fatalf("a bound device: %v", err)
		}
		if got := read(filepath.Join(vfio, "unbind")); got != "" {
			t.Errorf("a device bound to vfio-pci was unbound")
		}
	})
	t.Run("no driver_override", func(t *testing.T) {
		root := fakeSysfs(t, ivshmem("0000:00:04.0"))
		dev := pci.Device{Address: "0000:00:04.0", Path: filepath.Join(root, "bus", "pci", "devices", "0000:00:04.0")}
		if err := pci.BindVFIO(root, dev); err == nil {
			t.Fatal("BindVFIO without driver_override succeeded")
		}
	})
}

// TestOpenVFIONoInterrupts: a device VFIO cannot open for this process is
// ErrNoInterrupts (the agent then polls); a missing device is ErrNotFound.
func TestOpenVFIONoInterrupts(t *testing.T) {
	const addr = "0000:00:04.0"
	tests := []struct {
		name  string
		setup func(t *testing.T, root, dev, devRoot string)
	}{
		{"no driver", func(*testing.T, string, string, string) {}},
		{"another driver", func(t *testing.T, root, _, _ string) { bindTo(t, root, addr, "virtio-pci") }},
		{"no IOMMU group", func(t *testing.T, root, _, _ string) { bindTo(t, root, addr, pci.VFIODriver) }},
		{"no group file", func(t *testing.T, root, dev, _ string) {
			bindTo(t, root, addr, pci.VFIODriver)
			must(t, os.Symlink("../../../kernel/iommu_groups/1", filepath.Join(dev, "iommu_group")))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, devRoot := fakeSysfs(t, ivshmem(addr)), t.TempDir()
			tt.setup(t, root, filepath.Join(root, "bus", "pci", "devices", addr), devRoot)
			w, err := pci.OpenVFIO(pci.Options{SysfsRoot: root, DevRoot: devRoot})
			if !errors.Is(err, pci.ErrNoInterrupts) {
				if w != nil {
					w.Close()
				}
				t.Fatalf("OpenVFIO: %v, want ErrNoInterrupts", err)
			}
		})
	}
	if _, err := pci.OpenVFIO(pci.Options{SysfsRoot: fakeSysfs(t)}); !errors.Is(err, pci.ErrNotFound) {
		t.Errorf("no device: %v, want ErrNotFound", err)
	}
}
