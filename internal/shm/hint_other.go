//go:build !amd64

package shm

// Elsewhere the hints are no-ops: correctness never depends on them.

func prefetch(uintptr)  {}
func prefetchw(uintptr) {}
func demote(uintptr)    {}
