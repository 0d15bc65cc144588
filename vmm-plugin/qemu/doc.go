// Package qemu launches Sluice guests under QEMU: it builds the command line
// (kernel and initramfs boot, the ivshmem-doorbell device on the VM's Sluice
// endpoint, a serial console captured to a log file, a second serial port as
// the agent's control port, a QMP socket), chooses KVM where the CPU can run
// it and TCG elsewhere, starts QEMU as a daemon and stops it through QMP.
//
// Everything a guest needs on the host lives in one run directory per VM:
//
//	RUN_DIR/qmp.sock      QMP monitor (vmm-plugin/qmp)
//	RUN_DIR/control.sock  the agent's control port (guest-agent/control)
//	RUN_DIR/serial.log    the guest console
//	RUN_DIR/qemu.pid      QEMU's pid
//
// A VM's volume (Config.Volume), the host directory its GPU system calls see
// as their root, is shared with the guest over virtio-9p (tag VolumeTag,
// security model VolumeSecurityModel: see there why), and the guest's
// sluice-init mounts it at /volume.
//
// QEMU realizes the ivshmem device at start and never reconnects: the
// endpoint's server (sluiced) must be listening before Start, and a guest
// outlives its endpoint only as a guest without a GPU.
package qemu
