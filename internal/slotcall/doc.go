// Package slotcall is the guest side of the GENESYS syscall-slot protocol
// (abi/syscall.go): what a GPU thread does to make a system call through a
// VM's syscall area, in Go. The sim backend's built-in GPU programs use it,
// and so does the guest agent's CPU-side SDK.
//
// A call claims a slot by compare-and-swap FREE|s → POPULATING|s, writes
// number, flags, context and arguments, and publishes READY|s (release). A
// blocking call then polls for FINISHED|s, reads the result and frees the
// slot with FREE|s+1; a non-blocking call returns at once and the host frees
// the slot. Call does all of it; Claim, Publish and Wait are the steps, for a
// caller that fills several slots before waiting on any.
//
// Every access to the area is an atomic load or store of an aligned word, so
// a racing party (the host, a hostile guest thread) never makes a data race
// on this side. Waiting spins, then yields, then sleeps with a growing
// backoff, and gives up when the area's stop channel closes (ErrAborted) or
// its timeout passes (ErrTimeout). A slot whose state word goes somewhere
// the protocol does not allow while this side owns it is ErrLost.
//
// Publish sets the slot's ready-map hint (abi.FeatureReadyMap) after READY,
// as the GPU library does: the host finds the slot in its next pass instead
// of its next sweep of every state word.
package slotcall
