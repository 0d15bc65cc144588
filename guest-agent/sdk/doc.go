// Package sdk is the tenant side of Sluice's shared-memory ABI v1: it opens
// the region a Transport exposes (ivshmem BAR2 in a VM, the memfd in process
// mode), validates its header, and submits command records to channels and
// waits for their completion.
//
// The guest owns each channel's put index and the records behind it; the host
// owns get, fence and the error. A Channel writes records, publishes put with
// an atomic store after them, and rings the channel's doorbell. Completion is
// observed in get: after a short busy-poll, a waiter sleeps on its ivshmem
// eventfd until the host signals it where the host and the transport allow
// (abi.FeatureWake, Interrupts: process guests), and otherwise keeps polling,
// yielding, then sleeping between polls (see Poll).
//
// The host is trusted with the guest's own work but the header is still
// validated before any offset in it is used, and indices the host publishes
// are checked so a confused host yields an error, not a hang or a panic.
package sdk
