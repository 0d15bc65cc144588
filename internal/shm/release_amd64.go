package shm

// release64 is a store that no earlier store of the goroutine passes: on
// amd64 every store is (TSO), so a plain one, with no locked exchange and
// so no stall until the store buffer drains and the line is owned.
func release64(b []byte, off uint64, v uint64) { put64(b, off, v) }
