// Package shm gives typed, bounds-checked access to a shared-memory region
// that another, untrusted party writes concurrently: atomic loads and stores
// of aligned words, and copies in and out. It also maps and unmaps memfds.
//
// Every accessor checks its offset against the region and panics on a bad
// offset: offsets come from the host's own Layout, never from the region, so
// a bad one is a bug on this side, not guest input.
package shm
