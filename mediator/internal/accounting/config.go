package accounting

import (
	"fmt"
	"math"
)

// Defaults of Config.
const (
	DefaultPollNs     = 500_000    // 500 µs per active channel
	DefaultMinPollNs  = 200_000    // 200 µs
	DefaultMaxPollNs  = 20_000_000 // 20 ms
	DefaultRatio      = 51         // 1.9% of the time polling: within 2% of a core with jitter
	DefaultSampleNs   = 2_000      // 2 µs
	DefaultJitter     = 0.25
	DefaultIdleFactor = 10
)

// MaxPeriodNs bounds the mean length of a period (MaxPollNs × (1 + Ratio) ×
// IdleFactor), so that no length computation overflows.
const MaxPeriodNs = int64(3600e9)

// Config configures a Poller. Zero values mean the defaults.
type Config struct {
	Method Method // "" means loga
	// PollNs is the mean poll phase length per active channel, clamped to
	// [MinPollNs, MaxPollNs] once multiplied.
	PollNs, MinPollNs, MaxPollNs int64
	// Ratio is the non-poll : poll length ratio (default 51: 1.9% of the time
	// polling). Negative: no non-poll phase, poll all the time.
	Ratio float64
	// SampleNs is the interval between status reads inside a poll phase.
	SampleNs int64
	// Jitter randomizes both phase lengths uniformly in ±Jitter around their
	// mean (default 0.25; below 1). Negative: no jitter.
	Jitter float64
	// IdleFactor stretches the period this many times when at most one VM
	// was active in the poll phase (default 10; at least 1).
	IdleFactor float64
	// Seed seeds the jitter.
	Seed int64
}

// Validate fills in the defaults and checks the result.
func (c *Config) Validate() error {
	if c.Method == "" {
		c.Method = MethodLoga
	}
	if _, err := NewEstimator(c.Method); err != nil {
		return fmt.Errorf("accounting config: %w", err)
	}
	for _, f := range []struct {
		name string
		v    *int64
		def  int64
	}{
		{"PollNs", &c.PollNs, DefaultPollNs},
		{"MinPollNs", &c.MinPollNs, DefaultMinPollNs},
		{"MaxPollNs", &c.MaxPollNs, DefaultMaxPollNs},
		{"SampleNs", &c.SampleNs, DefaultSampleNs},
	} {
		if *f.v < 0 {
			return fmt.Errorf("accounting config: %w: %s %d is negative", ErrInvalidConfig, f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name string
		v    *float64
		def  float64
	}{
		{"Ratio", &c.Ratio, DefaultRatio},
		{"Jitter", &c.Jitter, DefaultJitter},
		{"IdleFactor", &c.IdleFactor, DefaultIdleFactor},
	} {
		if math.IsNaN(*f.v) || math.IsInf(*f.v, 0) {
			return fmt.Errorf("accounting config: %w: %s is %v", ErrInvalidConfig, f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return c.check()
}

func (c *Config) check() error {
	switch {
	case c.MinPollNs > c.MaxPollNs:
		return fmt.Errorf("accounting config: %w: MinPollNs %d above MaxPollNs %d", ErrInvalidConfig, c.MinPollNs, c.MaxPollNs)
	case c.SampleNs > c.MinPollNs:
		return fmt.Errorf("accounting config: %w: SampleNs %d above MinPollNs %d", ErrInvalidConfig, c.SampleNs, c.MinPollNs)
	case c.Jitter >= 1:
		return fmt.Errorf("accounting config: %w: Jitter %v, want below 1", ErrInvalidConfig, c.Jitter)
	case c.IdleFactor < 1:
		return fmt.Errorf("accounting config: %w: IdleFactor %v, want at least 1", ErrInvalidConfig, c.IdleFactor)
	}
	if period := float64(c.MaxPollNs) * (1 + c.ratio()) * c.IdleFactor; period > float64(MaxPeriodNs) {
		return fmt.Errorf("accounting config: %w: a period may last %.0f ns, more than %d", ErrInvalidConfig, period, MaxPeriodNs)
	}
	return nil
}

// ratio is Ratio with "no non-poll phase" as 0.
func (c *Config) ratio() float64 { return max(c.Ratio, 0) }

// jitter is Jitter with "none" as 0.
func (c *Config) jitter() float64 { return max(c.Jitter, 0) }

// meanPollNs is the mean poll phase length for n active channels.
func (c *Config) meanPollNs(n int) int64 {
	n = max(n, 1)
	if c.PollNs > c.MaxPollNs/int64(n) {
		return c.MaxPollNs
	}
	return min(max(c.PollNs*int64(n), c.MinPollNs), c.MaxPollNs)
}

// meanNonPollNs is the mean non-poll phase length after a poll phase of mean
// length poll in which vms VMs were active.
func (c *Config) meanNonPollNs(poll int64, vms int) int64 {
	period := float64(poll) * (1 + c.ratio())
	if vms <= 1 {
		period *= c.IdleFactor
	}
	return max(int64(period)-poll, 0)
}
