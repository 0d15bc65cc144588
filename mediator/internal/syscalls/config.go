package syscalls

import (
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// Config tunes one VM's forwarder.
type Config struct {
	// Window is the coalescing window: how long a batch waits for more calls
	// after its first (default 0: a batch goes as soon as a scan finds no
	// more READY slots).
	Window time.Duration
	// Batch is the most calls in one message to the proxy (default 256,
	// 1..proxyproto.MaxBatch).
	Batch int
	// Spin is how long the forwarder keeps scanning after the last activity
	// before it falls back to IdleScan (default 200µs).
	Spin time.Duration
	// IdleScan is the scan interval while idle (default 1ms): a kernel that
	// makes calls without ringing is still served.
	IdleScan time.Duration
	// RestartDelay is the first wait before a dead proxy is started again; it
	// doubles up to MaxRestartDelay while proxies die young (default 100ms).
	RestartDelay time.Duration
}

// MaxRestartDelay bounds the restart backoff.
const MaxRestartDelay = 10 * time.Second

// DefaultConfig is the forwarder's default tuning.
func DefaultConfig() Config {
	return Config{Batch: 256, Spin: 200 * time.Microsecond, IdleScan: time.Millisecond, RestartDelay: 100 * time.Millisecond}
}

// Validate checks c; it does not fill in defaults.
func (c Config) Validate() error {
	switch {
	case c.Window < 0 || c.Window > time.Second:
		return fmt.Errorf("syscall window %v: want 0..1s", c.Window)
	case c.Batch < 1 || c.Batch > proxyproto.MaxBatch:
		return fmt.Errorf("syscall batch %d: want 1..%d", c.Batch, proxyproto.MaxBatch)
	case c.Spin < 0 || c.Spin > time.Second:
		return fmt.Errorf("syscall spin %v: want 0..1s", c.Spin)
	case c.IdleScan < 10*time.Microsecond || c.IdleScan > time.Second:
		return fmt.Errorf("syscall idle scan %v: want 10µs..1s", c.IdleScan)
	case c.RestartDelay <= 0 || c.RestartDelay > MaxRestartDelay:
		return fmt.Errorf("proxy restart delay %v: want (0, %v]", c.RestartDelay, MaxRestartDelay)
	}
	return nil
}
