// Package syscalls is the mediator's half of GPU system calls (GENESYS): for
// each VM a Forwarder finds READY slots in the VM's syscall area, copies each
// slot out, validates the copy, takes the slot (READY → PROCESSING by
// compare-and-swap, or READY → FREE for a non-blocking call) and forwards the
// copy, in batches, to the VM's proxy (a sandboxed sluice-proxy process,
// mediator/internal/proxy); results come back on the same socket and are
// written into their slots (args[0] the value, args[1] the errno) before the
// slot turns FINISHED.
//
// # Finding work
//
// A GPU cannot ring an eventfd, so the forwarder polls, adaptively: after any
// activity (a slot taken, a doorbell on the VM's syscall vector) it scans
// continuously for Config.Spin; then it scans every Config.IdleScan until
// the next doorbell. A guest that launches a kernel making calls rings the
// syscall vector once to start the spin at once.
//
// # Coalescing
//
// Calls found within Config.Window of the first call of a batch travel to
// the proxy in one message, up to Config.Batch calls (GENESYS's coalescing:
// fewer messages and hand-offs under load, a bounded wait when there is
// little). Both change at run time (SetConfig).
//
// # Fastcalls
//
// A fastcall (Plan 9 currying) is a pread, pwrite, read or write whose file,
// heap range, length and offset were validated once, at registration, by the
// proxy inside the sandbox, which then hands the forwarder a duplicate of the
// file descriptor. A slot carrying a fastcall number is served by the
// forwarder itself, with one table lookup and the call: no proxy round trip,
// no argument checks. Revocation bumps the entry's generation, so the old
// number fails with ESTALE even once the entry is reused.
//
// # Failure
//
// Everything in the area is hostile: a malformed slot gets an errno (ENOSYS
// for an unknown call, EINVAL for unknown flags), a guest that rewrites a
// slot's state while it is served loses that result, and nothing a guest
// writes reaches the proxy except through the copy. If the proxy dies, every
// call it held fails with EIO and a fresh proxy is started after a backoff;
// nothing else (another VM, the mediator) notices.
package syscalls
