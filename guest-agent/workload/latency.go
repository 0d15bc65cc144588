package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
)

// LatencyConfig is one latency run.
type LatencyConfig struct {
	Count  int // measured round trips (> 0)
	Warmup int // unmeasured round trips first
	// Causes classifies each measured round trip by what the guest saw
	// (LatencyCause; the waits then read the clock on every look), a
	// diagnostic.
	Causes bool
}

// LatencyResult is the distribution of NOP round trips: submit and
// doorbell until get is seen past the record.
type LatencyResult struct {
	Workload  string  `json:"workload"`
	Channel   int     `json:"channel"`
	Count     int     `json:"count"`
	ElapsedNs int64   `json:"elapsed_ns"`
	RoundTrip Summary `json:"round_trip_ns"`
	// Causes, with LatencyConfig.Causes, are the round trips by class.
	Causes []LatencyCause `json:"causes,omitempty"`
}

// Latency runs cfg.Warmup then cfg.Count NOP round trips on ch, one at a
// time.
func Latency(ctx context.Context, ch *sdk.Channel, cfg LatencyConfig) (res LatencyResult, err error) {
	res = LatencyResult{Workload: "latency", Channel: ch.Index()}
	if cfg.Count <= 0 || cfg.Warmup < 0 {
		return res, errors.New("latency run needs a positive count and a non-negative warmup")
	}
	nop := abi.Command{Op: abi.OpNop}
	for range cfg.Warmup {
		if err := runOne(ctx, ch, nop); err != nil {
			return res, fmt.Errorf("latency warmup: %w", err)
		}
	}
	samples := make([]time.Duration, 0, cfg.Count)
	var causes *causeTracker
	if cfg.Causes {
		causes = newCauseTracker(ch, cfg.Count)
	}
	start := time.Now()
	defer func() {
		res.ElapsedNs = int64(time.Since(start))
		res.Count = len(samples)
		if causes != nil {
			res.Causes = causes.summarize(samples)
		}
		res.RoundTrip = Summarize(samples)
	}()
	for range cfg.Count {
		if causes != nil {
			causes.begin()
		}
		t0 := time.Now()
		if err := runOne(ctx, ch, nop); err != nil {
			return res, fmt.Errorf("latency round trip: %w", err)
		}
		samples = append(samples, time.Since(t0))
		if causes != nil {
			causes.end()
		}
	}
	return res, nil
}

// runOne submits cmd and waits for it.
func runOne(ctx context.Context, ch *sdk.Channel, cmd abi.Command) error {
	idx, err := ch.Submit(ctx, cmd)
	if err != nil {
		return err
	}
	return ch.Wait(ctx, idx)
}
