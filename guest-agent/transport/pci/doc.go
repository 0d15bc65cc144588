// Package pci is the device-mode transport: inside a VM it finds the
// ivshmem-doorbell PCI device (vendor 0x1af4, device 0x1110) in sysfs,
// enables it, maps BAR0 (registers) and BAR2 (the shared region) through the
// sysfs resource files, and rings doorbells with a single 32-bit store to
// BAR0's Doorbell register. No driver is needed.
package pci
