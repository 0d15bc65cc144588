package shm

// Cache-line hints (hint.go), in assembly: Go has no intrinsic for them.
// None faults, whatever the address.

//go:noescape
func prefetch(p uintptr)

//go:noescape
func prefetchw(p uintptr)

//go:noescape
func demote(p uintptr)
