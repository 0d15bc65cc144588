package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
)

// MemsetConfig is one memset run: ALLOC Buffers device buffers of Size
// bytes (handles FirstHandle on), MEMSET them in turn with Depth in flight
// until Duration or Count is reached, then FREE them.
type MemsetConfig struct {
	Size        uint64        // bytes per buffer (> 0)
	Buffers     int           // buffers to allocate (> 0)
	FirstHandle uint32        // the first buffer's handle; default 1
	Depth       int           // MEMSETs kept in flight; default 1
	Duration    time.Duration // stop after this long; 0: no time limit
	Count       int           // stop after this many MEMSETs; 0: no count limit
}

// Validate checks that the run is well formed. Neither a duration nor a
// count allocates and frees only.
func (c MemsetConfig) Validate() error {
	switch {
	case c.Size == 0:
		return errors.New("memset buffer size must be positive")
	case c.Buffers <= 0:
		return errors.New("memset needs at least one buffer")
	case c.Duration < 0 || c.Count < 0 || c.Depth < 0:
		return errors.New("memset duration, count and depth must not be negative")
	case uint64(c.firstHandle())+uint64(c.Buffers)-1 > abi.MaxHandle:
		return fmt.Errorf("memset handles %d..%d: past the largest handle %d", c.firstHandle(), uint64(c.firstHandle())+uint64(c.Buffers)-1, abi.MaxHandle)
	}
	return nil
}

func (c MemsetConfig) firstHandle() uint32 { return max(c.FirstHandle, 1) }

// MemsetResult is what a memset run did. Turnaround is each MEMSET's submit
// to completion observed, by the guest's wall clock.
type MemsetResult struct {
	Workload string `json:"workload"`
	Channel  int    `json:"channel"`
	Size     uint64 `json:"size"`
	// Buffers is how many buffers were allocated; AllocError the channel
	// error of the ALLOC that was refused (none was tried after it), e.g.
	// "no memory" past the VM's quota.
	Buffers      int     `json:"buffers"`
	AllocError   string  `json:"alloc_error,omitempty"`
	Memsets      int     `json:"memsets"`
	Bytes        uint64  `json:"bytes"` // set by the MEMSETs completed
	ElapsedNs    int64   `json:"elapsed_ns"`
	TurnaroundNs Summary `json:"turnaround_ns"`
}

// Memset runs cfg on ch. A refused ALLOC ends the allocation (the channel is
// reset) and the run goes on with the buffers it has, which is not an
// error unless it has none; a failed MEMSET or FREE is. On an error it
// returns what it did so far with the error.
func Memset(ctx context.Context, ch *sdk.Channel, cfg MemsetConfig) (res MemsetResult, err error) {
	res = MemsetResult{Workload: "memset", Channel: ch.Index(), Size: cfg.Size}
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	start := time.Now()
	var turnaround []time.Duration
	defer func() {
		res.ElapsedNs = int64(time.Since(start))
		res.Memsets = len(turnaround)
		res.Bytes = uint64(len(turnaround)) * cfg.Size
		res.TurnaroundNs = Summarize(turnaround)
	}()
	first := cfg.firstHandle()
	for i := range cfg.Buffers {
		h := first + uint32(i)
		err := do(ctx, ch, abi.Command{Op: abi.OpAlloc, Handle: h, Size: cfg.Size})
		var ce *sdk.ChannelError
		if errors.As(err, &ce) {
			res.AllocError = ce.Code.String()
			if err := ch.Reset(ctx); err != nil {
				return res, err
			}
			break
		}
		if err != nil {
			return res, fmt.Errorf("allocating buffer %d: %w", h, err)
		}
		res.Buffers++
	}
	if res.Buffers == 0 {
		return res, fmt.Errorf("allocating a buffer of %d bytes: %s", cfg.Size, res.AllocError)
	}
	if err := memsets(ctx, ch, cfg, res.Buffers, &turnaround); err != nil {
		return res, err
	}
	for i := range res.Buffers {
		if err := do(ctx, ch, abi.Command{Op: abi.OpFree, Handle: first + uint32(i)}); err != nil {
			return res, fmt.Errorf("freeing buffer %d: %w", first+uint32(i), err)
		}
	}
	return res, nil
}

// memsets MEMSETs buffers handles in turn, cfg.Depth in flight, until
// cfg's duration or count, appending each one's turnaround.
func memsets(ctx context.Context, ch *sdk.Channel, cfg MemsetConfig, buffers int, turnaround *[]time.Duration) error {
	if cfg.Duration == 0 && cfg.Count == 0 {
		return nil
	}
	var end time.Time
	if cfg.Duration > 0 {
		end = time.Now().Add(cfg.Duration)
	}
	type flight struct {
		idx uint32
		t0  time.Time
	}
	var queue []flight
	submitted := 0
	for {
		for len(queue) < max(cfg.Depth, 1) && (cfg.Count == 0 || submitted < cfg.Count) && (end.IsZero() || time.Now().Before(end)) {
			h := cfg.firstHandle() + uint32(submitted%buffers)
			t0 := time.Now()
			idx, err := ch.Submit(ctx, abi.Command{Op: abi.OpMemset, Handle: h, Length: cfg.Size, Value: uint64(submitted % 256)})
			if err != nil {
				return fmt.Errorf("memset of buffer %d: %w", h, err)
			}
			queue = append(queue, flight{idx, t0})
			submitted++
		}
		if len(queue) == 0 {
			return nil
		}
		if err := ch.Wait(ctx, queue[0].idx); err != nil {
			return fmt.Errorf("memset: %w", err)
		}
		*turnaround = append(*turnaround, time.Since(queue[0].t0))
		queue = queue[1:]
	}
}

// do submits cmd and waits for it.
func do(ctx context.Context, ch *sdk.Channel, cmd abi.Command) error {
	idx, err := ch.Submit(ctx, cmd)
	if err != nil {
		return err
	}
	return ch.Wait(ctx, idx)
}
