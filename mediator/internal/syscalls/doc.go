// Package syscalls is the mediator's half of GPU system calls (GENESYS): for
// each VM a Forwarder finds READY slots in the VM's syscall area, copies each
// slot out, validates the copy, takes the slot (READY → PROCESSING by
// compare-and-swap, or READY → FREE for a non-blocking call) and forwards the
// copy, in batches, to the VM's proxy (a sandboxed sluice-proxy process,
// mediator/internal/proxy) through a request ring in shared memory; results
// come back through a result ring and are written into their slots (args[0]
// the value, args[1] the errno) before the slot turns FINISHED.
//
// # The rings
//
// For each proxy it starts, the forwarder creates a sealed memfd (the proxy
// can neither shrink nor grow it) holding both rings (proxyproto's ring.go)
// and sends it after the proxy's Ready. The poller publishes each batch into
// the request ring and, while it spins, consumes the result ring on every
// pass: no thread wakes for a result. Before it stops spinning it says so in
// the rings and looks once more; the proxy then sends a one-byte kick on the
// socket, on which the receiver thread (blocked in recvmsg) consumes the
// results and wakes the poller. The proxy is kicked the same way only when it
// said it sleeps. The result ring is the proxy's to write and so hostile: the
// forwarder keeps its own index, reads one ring's worth at most per look,
// and writes a result only into a slot that still waits for exactly that
// call (slot and sequence number in its in-flight table); a forged request
// head reads as a full ring, so calls then wait in their slots.
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
