// Package process is the process-guest transport: a host process joins a
// VM's endpoint (the ivshmem server's UNIX socket) the way QEMU's
// ivshmem-doorbell device would, maps the shared memory it is handed, and
// rings the host peer's doorbells by signalling its eventfds. It lets the
// agent and tests drive a mediator without a VM.
package process
