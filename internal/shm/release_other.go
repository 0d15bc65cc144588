//go:build !amd64

package shm

// release64 is a store that no earlier store of the goroutine passes: an
// atomic store, which is a release operation on every architecture Go
// supports.
func release64(b []byte, off uint64, v uint64) { store64(b, off, v) }
