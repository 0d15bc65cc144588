//go:build !linux

package accounting

import "time"

var cpuEpoch = time.Now()

// threadCPUNs falls back to wall time where thread CPU time is not read:
// the wall driver spins through poll phases, so the two nearly agree.
func threadCPUNs() int64 { return int64(time.Since(cpuEpoch)) }
