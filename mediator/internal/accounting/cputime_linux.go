package accounting

import "golang.org/x/sys/unix"

// threadCPUNs is the calling thread's CPU time; the wall driver locks its
// goroutine to one thread, so differences measure the poller alone.
func threadCPUNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}
