package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/sdk/sdktest"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// deadlockGuard bounds waits that only a bug would make long.
const deadlockGuard = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), deadlockGuard)
	t.Cleanup(cancel)
	return ctx
}

func channel(t *testing.T, d *sdk.Device, i int) *sdk.Channel {
	t.Helper()
	c, err := d.Channel(i)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func nop() abi.Command           { return abi.Command{Op: abi.OpNop} }
func fence(v uint64) abi.Command { return abi.Command{Op: abi.OpFence, Value: v} }

func TestSubmitWait(t *testing.T) {
	ctx := testCtx(t)
	h, d := sdktest.Open(t, sdktest.Config{})
	c := channel(t, d, 1)
	last, err := c.Submit(ctx, nop(), abi.Command{Op: abi.OpThrottle, DurationNs: 1000}, fence(77))
	if err != nil {
		t.Fatal(err)
	}
	if last != 2 || c.Put() != 3 {
		t.Fatalf("last %d put %d, want 2 3", last, c.Put())
	}
	if err := c.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	if c.Fence() != 77 || c.Completed() != 3 || c.Get() != 3 || c.State() != abi.ChannelIdle {
		t.Errorf("fence %d completed %d get %d state %v, want 77 3 3 idle", c.Fence(), c.Completed(), c.Get(), c.State())
	}
	if h.Doorbells(1) != 1 || h.Doorbells(0) != 0 {
		t.Errorf("doorbells %d on vector 1, %d on 0; want 1 0", h.Doorbells(1), h.Doorbells(0))
	}
	if err := c.Sync(ctx); err != nil {
		t.Errorf("Sync with nothing pending: %v", err)
	}
	if _, err := c.SubmitRecord(ctx); err == nil {
		t.Error("empty submit accepted")
	}
}

func TestWaitNotSubmitted(t *testing.T) {
	_, d := sdktest.Open(t, sdktest.Config{})
	c := channel(t, d, 0)
	if err := c.Wait(testCtx(t), c.Put()); !errors.Is(err, sdk.ErrNotSubmitted) {
		t.Fatalf("Wait(put): %v, want ErrNotSubmitted", err)
	}
}

// Many more records than the ring holds, singly and in batches larger than
// the ring, wrap the ring many times; fences show every record ran in order.
func TestRingWrapAround(t *testing.T) {
	ctx := testCtx(t)
	h, d := sdktest.Open(t, sdktest.Config{Layout: sdktest.SmallLayout()})
	c := channel(t, d, 0)
	entries := h.Layout().RingEntries
	for i := range uint64(5 * entries) {
		last, err := c.Submit(ctx, nop(), fence(i))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(ctx, last); err != nil {
			t.Fatal(err)
		}
		if c.Fence() != i {
			t.Fatalf("fence %d, want %d", c.Fence(), i)
		}
	}
	batch := make([]abi.Command, 3*entries+5)
	for i := range batch {
		batch[i] = fence(uint64(1000 + i))
	}
	last, err := c.Submit(ctx, batch...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	want := uint64(10*entries) + uint64(len(batch))
	if c.Fence() != uint64(1000+len(batch)-1) || c.Completed() != want {
		t.Errorf("fence %d completed %d, want %d %d", c.Fence(), c.Completed(), 1000+len(batch)-1, want)
	}
}

// A full ring makes Submit wait for space, not overwrite records the host
// has not read.
func TestSubmitWaitsForSpace(t *testing.T) {
	ctx := testCtx(t)
	h, d := sdktest.Open(t, sdktest.Config{Layout: sdktest.SmallLayout()})
	c := channel(t, d, 0)
	entries := h.Layout().RingEntries
	h.Pause()
	for i := range entries {
		if _, err := c.Submit(ctx, fence(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := c.Submit(short, fence(999)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit on a full ring of a paused host: %v, want DeadlineExceeded", err)
	}
	if c.Put() != entries {
		t.Fatalf("put %d after a refused submit, want %d", c.Put(), entries)
	}
	h.Resume()
	last, err := c.Submit(ctx, fence(1000))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	if c.Fence() != 1000 || c.Completed() != uint64(entries)+1 {
		t.Errorf("fence %d completed %d, want 1000 %d", c.Fence(), c.Completed(), entries+1)
	}
}

func TestChannelErrorAndReset(t *testing.T) {
	ctx := testCtx(t)
	h, d := sdktest.Open(t, sdktest.Config{Handler: sdktest.FailAt(0, 3, abi.ErrDevice)})
	c := channel(t, d, 0)
	last, err := c.Submit(ctx, nop(), nop(), fence(2), nop(), fence(4), nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, 2); err != nil {
		t.Fatalf("record before the failure: %v", err)
	}
	for _, idx := range []uint32{3, last} {
		err := c.Wait(ctx, idx)
		var ce *sdk.ChannelError
		if !errors.As(err, &ce) || ce.Code != abi.ErrDevice || ce.Index != 3 || ce.Channel != 0 {
			t.Fatalf("Wait(%d): %v, want device error at 3", idx, err)
		}
		if !errors.Is(err, abi.ErrDevice) || abi.CodeOf(err) != abi.ErrDevice {
			t.Errorf("Wait(%d): %v does not carry the code", idx, err)
		}
	}
	if code, at := c.Err(); code != abi.ErrDevice || at != 3 || c.State() != abi.ChannelFailed {
		t.Errorf("Err %v at %d state %v", code, at, c.State())
	}
	if c.Fence() != 2 {
		t.Errorf("fence %d: records after the failure ran", c.Fence())
	}
	if err := c.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if code, _ := c.Err(); code != abi.OK || c.Get() != c.Put() {
		t.Fatalf("after reset: error %v get %d put %d", code, c.Get(), c.Put())
	}
	last, err = c.Submit(ctx, fence(5))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, last); err != nil || c.Fence() != 5 {
		t.Fatalf("after reset: %v, fence %d", err, c.Fence())
	}
	if h.Doorbells(0) != 3 {
		t.Errorf("%d doorbells, want 3 (submit, reset, submit)", h.Doorbells(0))
	}
}

func TestHostRejectsRecords(t *testing.T) {
	tests := []struct {
		name string
		rec  abi.Record
		want abi.ErrorCode
	}{
		{"zero opcode", abi.Record{}, abi.ErrBadOpcode},
		{"unknown opcode", abi.EncodeCommand(abi.Command{Op: 200}), abi.ErrBadOpcode},
		{"reserved byte", func() abi.Record { r := abi.EncodeCommand(nop()); r[63] = 1; return r }(), abi.ErrBadRecord},
		{"throttle too long", abi.EncodeCommand(abi.Command{Op: abi.OpThrottle, DurationNs: 1 << 62}), abi.ErrTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			_, d := sdktest.Open(t, sdktest.Config{})
			c := channel(t, d, 2)
			idx, err := c.SubmitRecord(ctx, tt.rec)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Wait(ctx, idx); abi.CodeOf(err) != tt.want {
				t.Fatalf("Wait: %v, want %v", err, tt.want)
			}
		})
	}
}

// A failed channel frees no ring space: Submit reports the failure instead
// of waiting forever.
func TestSubmitOnFailedFullRing(t *testing.T) {
	ctx := testCtx(t)
	h, d := sdktest.Open(t, sdktest.Config{Layout: sdktest.SmallLayout()})
	c := channel(t, d, 0)
	if _, err := c.SubmitRecord(ctx, abi.Record{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, 0); abi.CodeOf(err) != abi.ErrBadOpcode {
		t.Fatal(err)
	}
	batch := make([]abi.Command, h.Layout().RingEntries+1)
	for i := range batch {
		batch[i] = nop()
	}
	_, err := c.Submit(ctx, batch...)
	var ce *sdk.ChannelError
	if !errors.As(err, &ce) || ce.Code != abi.ErrBadOpcode || ce.Index != 0 {
		t.Fatalf("Submit on a failed, full ring: %v", err)
	}
}

// A host that publishes get ahead of put is reported, not waited on.
func TestHostProtocolViolation(t *testing.T) {
	ctx := testCtx(t)
	h, d := sdktest.Open(t, sdktest.Config{})
	c := channel(t, d, 0)
	h.Pause()
	if _, err := c.Submit(ctx, nop()); err != nil {
		t.Fatal(err)
	}
	h.Close()
	shm.New(h.Region()).Store32(h.Layout().ChannelOff(0)+abi.ChGet, 5)
	if err := c.Wait(ctx, 0); !errors.Is(err, sdk.ErrProtocol) {
		t.Fatalf("Wait with get ahead of put: %v, want ErrProtocol", err)
	}
	if _, err := c.Submit(ctx, nop()); !errors.Is(err, sdk.ErrProtocol) {
		t.Fatalf("Submit with get ahead of put: %v, want ErrProtocol", err)
	}
}

func TestWaitHonoursContext(t *testing.T) {
	ctx := testCtx(t)
	polls := map[string]sdk.Poll{
		"default": sdk.DefaultPoll(),
		"no spin": {Yield: time.Microsecond, MaxSleep: time.Millisecond},
		"spin":    {Spin: time.Millisecond},
	}
	for name, p := range polls {
		t.Run(name, func(t *testing.T) {
			h, d := sdktest.Open(t, sdktest.Config{}, sdk.WithPoll(p))
			c := channel(t, d, 0)
			h.Pause()
			last, err := c.Submit(ctx, nop())
			if err != nil {
				t.Fatal(err)
			}
			short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			if err := c.Wait(short, last); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait on a paused host: %v", err)
			}
			h.Resume()
			if err := c.Wait(ctx, last); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// FuzzChannelHostState gives a channel arbitrary host-owned fields: nothing
// may panic, and a record the host never reached is not reported done
// without an error.
func FuzzChannelHostState(f *testing.F) {
	f.Add(uint32(0), uint32(0), uint32(0), uint32(3), uint32(0))
	f.Add(uint32(2), uint32(1), uint32(1), uint32(3), uint32(2))
	f.Add(uint32(0xffffffff), uint32(7), uint32(0x80000000), uint32(1), uint32(0))
	f.Fuzz(func(t *testing.T, get, code, errIdx, put, idx uint32) {
		mem, l := validRegion(t)
		r := shm.New(mem)
		desc := l.ChannelOff(0)
		r.Store32(desc+abi.ChPut, put)
		r.Store32(desc+abi.ChGet, get)
		r.Store32(desc+abi.ChError, code)
		r.Store32(desc+abi.ChErrorIndex, errIdx)
		d, err := sdk.Open(&memTransport{mem: mem})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := d.Channel(0)
		done, err := c.Done(idx)
		if done && err == nil && int32(get-(idx+1)) < 0 {
			t.Fatalf("record %d done with get %d", idx, get)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		defer cancel()
		c.Submit(ctx, nop())
	})
}
