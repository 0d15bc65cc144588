// Package pci is the device-mode transport: inside a VM it finds the
// ivshmem-doorbell PCI device (vendor 0x1af4, device 0x1110) in sysfs,
// enables it, maps BAR0 (registers) and BAR2 (the shared region) through the
// sysfs resource files, and rings doorbells with a single 32-bit store to
// BAR0's Doorbell register. No driver is needed; its waiters poll.
//
// Where the guest binds the device to vfio-pci (it needs an IOMMU: a q35
// guest with intel-iommu; Debian's kernel lacks VFIO's no-IOMMU mode),
// OpenVFIO opens it through VFIO instead: the BARs are mapped from the VFIO
// device, and its MSI-X vectors become eventfds (VFIO_DEVICE_SET_IRQS), so
// that a waiter sleeps until the host signals its channel's vector (Waking
// implements sdk.Interrupts, as a process guest's transport does). ivshmem-
// doorbell raises no INTx (its vectors are MSI-X only), so UIO's generic PCI
// driver cannot deliver them.
package pci
