package cuda

import "testing"

// TestDeviceDescription: the backend tells its GPU's name, memory and PCI
// address as the driver reports them (the daemon's inventory merges them
// with sysfs).
func TestDeviceDescription(t *testing.T) {
	r := newRig(t, nil)
	if n, m, p := r.b.DeviceName(), r.b.DeviceMemory(), r.b.PCIBusID(); n != "Fake GPU" || m != 80<<30 || p != "0000:00:06.0" {
		t.Fatalf("name %q memory %d PCI %q", n, m, p)
	}
}
