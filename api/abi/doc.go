// Package abi is Sluice's shared-memory ABI, version 1: the layout of the
// per-VM region that guests see as ivshmem BAR2, and the encoding of
// everything in it.
//
// The region is one power-of-two block of memory shared between one guest and
// the mediator. Its parts, each page aligned:
//
//	header page   Header: magic, version, features, host peer id, the offsets
//	              and sizes of every other part, mediator epoch, heartbeat.
//	channels      N ChannelDesc of 128 bytes: a guest-owned cache line (put)
//	              and a host-owned cache line (get, fence, error).
//	rings         N rings of RingEntries 64-byte command records.
//	syscall area  reserved in v1 (GENESYS slots; see SlotState).
//	heap          guest-managed bytes that commands reference by offset.
//
// Everything in the region is hostile to the host: a host never decodes a
// field in place. It copies a record out (Record), decodes and validates the
// copy (DecodeCommand), and acts on the decoded value. The host's idea of the
// layout is its own Layout value, never the header the guest can scribble on.
//
// The C header include/sluice_abi.h describes the same layout for guest and
// GPU code; abi_c_test.go compiles it and checks that every size and offset
// agrees with this package.
//
// All multi-byte fields are little-endian.
package abi
