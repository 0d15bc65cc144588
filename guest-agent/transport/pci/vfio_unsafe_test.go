//go:build linux

package pci

import (
	"testing"
	"unsafe"
)

// TestVFIOStructSizes: the structs passed to VFIO have linux/vfio.h's
// sizes (argsz says so to the kernel).
func TestVFIOStructSizes(t *testing.T) {
	for _, tt := range []struct {
		name      string
		got, want uintptr
	}{
		{"vfio_group_status", unsafe.Sizeof(vfioGroupStatus{}), 8},
		{"vfio_region_info", unsafe.Sizeof(vfioRegionInfo{}), 32},
		{"vfio_irq_info", unsafe.Sizeof(vfioIRQInfo{}), 16},
		{"vfio_irq_set", unsafe.Sizeof(vfioIRQSetHeader{}), vfioIRQSetHeaderSize},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: %d bytes, want %d", tt.name, tt.got, tt.want)
		}
	}
}
