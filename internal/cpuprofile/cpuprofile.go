// Package cpuprofile starts a Go CPU profile for a diagnostic environment
// variable of the daemons (sluiced's SLUICE_CPU_PROFILE, sluice-proxy's
// SLUICE_PROXY_CPU_PROFILE).
package cpuprofile

import (
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
)

// Start writes a CPU profile to path until the returned stop is called
// (once is enough; later calls do nothing).
func Start(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the CPU profile: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}, nil
}
