package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
)

// ErrNotSubmitted means Wait was asked for a record index not yet submitted.
var ErrNotSubmitted = errors.New("record not submitted")

// ChannelError is a command failure the host reported on a channel: Code at
// the record with free-running index Index. errors.Is(err, abi.ErrTooLong)
// and abi.CodeOf(err) see the code.
type ChannelError struct {
	Channel uint32
	Code    abi.ErrorCode
	Index   uint32
}

func (e *ChannelError) Error() string {
	return fmt.Sprintf("channel %d: record %d failed: %s", e.Channel, e.Index, e.Code)
}

func (e *ChannelError) Unwrap() error { return e.Code }

// Channel submits records to one channel of a Device and waits for them.
//
// A Channel is used by one goroutine at a time: it keeps the guest-owned put
// index in memory and writes the ring without locking. Different channels
// may be used concurrently.
type Channel struct {
	d       *Device
	idx     uint32
	desc    uint64 // offset of the descriptor
	entries uint32
	put     uint32
	poll    Poll
	sleeps  atomic.Uint64 // waits that slept on the eventfd
	quiet   atomic.Uint64 // submissions that left out the doorbell: the host was polling

	// Wait's condition and sleeper, made once (a closure passed on each
	// call is an allocation each command): they read waitIdx.
	waitIdx   uint32
	waitDone  func() (bool, error)
	waitSleep sleeper
	waitMade  bool
	w         waiter
}

func newChannel(d *Device, idx uint32) *Channel {
	c := &Channel{
		d:       d,
		idx:     idx,
		desc:    d.hdr.Layout.ChannelOff(idx),
		entries: d.hdr.Layout.RingEntries,
		poll:    d.poll,
		w:       newWaiter(),
	}
	// put is ours, but a previous user of the region (an earlier agent run)
	// may have advanced it: carry on from there.
	c.put = d.r.Load32(c.desc + abi.ChPut)
	return c
}

// SetPoll changes how this channel polls.
func (c *Channel) SetPoll(p Poll) error {
	if err := p.Validate(); err != nil {
		return err
	}
	c.poll = p
	c.waitMade = false // the sleeper depends on NoWake
	return nil
}

// Index is the channel's number, which is also its doorbell vector.
func (c *Channel) Index() int { return int(c.idx) }

// Entries is how many records the channel's ring holds.
func (c *Channel) Entries() int { return int(c.entries) }

// Put is the free-running index the next submitted record gets.
func (c *Channel) Put() uint32 { return c.put }

// Get is the host's free-running index of the next record to complete.
func (c *Channel) Get() uint32 { return c.load32(abi.ChGet) }

// Fence is the value of the last FENCE the host completed.
func (c *Channel) Fence() uint64 { return c.d.r.Load64(c.desc + abi.ChFence) }

// Completed is how many records the host completed on this channel.
func (c *Channel) Completed() uint64 { return c.d.r.Load64(c.desc + abi.ChCompleted) }

// State is the host's view of the channel.
func (c *Channel) State() abi.ChannelState { return abi.ChannelState(c.load32(abi.ChState)) }

// Err is the channel's current error code (abi.OK if none) and the index of
// the record that failed.
func (c *Channel) Err() (abi.ErrorCode, uint32) {
	// The host writes the index before the code: a code read first comes
	// with its own index.
	code := abi.ErrorCode(c.load32(abi.ChError))
	return code, c.load32(abi.ChErrorIndex)
}

func (c *Channel) load32(field uint64) uint32 { return c.d.r.Load32(c.desc + field) }

// Submit encodes cmds, writes them to the ring and rings the doorbell. It
// returns the index of the last record written. ctx bounds only waits for
// ring space, not completion (see Wait). When the ring is full it
// publishes what it wrote so far and polls for space until ctx ends; a
// channel that failed frees no space, so Submit then returns the failure.
func (c *Channel) Submit(ctx context.Context, cmds ...abi.Command) (uint32, error) {
	var buf [8]abi.Record // a few commands at a time: no allocation
	recs := buf[:0]
	if len(cmds) > len(buf) {
		recs = make([]abi.Record, 0, len(cmds))
	}
	for _, cmd := range cmds {
		recs = append(recs, abi.EncodeCommand(cmd))
	}
	return c.SubmitRecord(ctx, recs...)
}

// SubmitRecord is Submit for raw records, which are not checked: tests use
// it to send garbage the host must reject.
func (c *Channel) SubmitRecord(ctx context.Context, recs ...abi.Record) (uint32, error) {
	if len(recs) == 0 {
		return c.put - 1, fmt.Errorf("submitting to channel %d: no records", c.idx)
	}
	for i := 0; i < len(recs); {
		free, err := c.space()
		if err != nil {
			return c.put - 1, err
		}
		if free == 0 {
			if err := c.publish(); err != nil {
				return c.put - 1, err
			}
			if err := c.waitSpace(ctx); err != nil {
				return c.put - 1, err
			}
			continue
		}
		for ; free > 0 && i < len(recs); free-- {
			c.d.r.CopyIn(c.d.hdr.Layout.RecordOff(c.idx, c.put), recs[i][:])
			c.put++
			i++
		}
	}
	return c.put - 1, c.publish()
}

// publish makes the written records visible (the atomic store orders them
// before put) and rings the channel's doorbell, unless the host says it
// polls put (abi.FeaturePolling: it then finds the records itself, or
// clears the word and looks at put once more before it stops). A doorbell
// is a system call in a process guest and a trap to the hypervisor in a
// VM, the largest part of a short command's round trip.
func (c *Channel) publish() error {
	c.d.r.Store32(c.desc+abi.ChPut, c.put)
	if c.d.hostPolling() {
		c.quiet.Add(1)
		return nil
	}
	return c.d.Doorbell(int(c.idx))
}

// Quiet is how many submissions left out the doorbell because the host was
// polling the channel (abi.FeaturePolling).
func (c *Channel) Quiet() uint64 { return c.quiet.Load() }

// space is how many records fit in the ring now.
func (c *Channel) space() (uint32, error) {
	get := c.Get()
	used := c.put - get
	if used > c.entries {
		return 0, fmt.Errorf("channel %d: get %d, put %d: %w", c.idx, get, c.put, ErrProtocol)
	}
	return c.entries - used, nil
}

func (c *Channel) waitSpace(ctx context.Context) error {
	// Any completion frees space: sleep until get passes the one seen.
	err := c.poll.until(ctx, func() (bool, error) {
		free, err := c.space()
		if err != nil || free > 0 {
			return true, err
		}
		if code, at := c.Err(); code != abi.OK {
			return true, &ChannelError{Channel: c.idx, Code: code, Index: at}
		}
		return false, nil
	}, c.sleeper(c.Get), &c.w)
	if err != nil {
		return fmt.Errorf("waiting for ring space: %w", err)
	}
	return nil
}

// Done reports whether record idx has completed: get has passed it, or the
// channel failed at or before it (then with the failure). It does not block.
func (c *Channel) Done(idx uint32) (bool, error) {
	if int32(idx-c.put) >= 0 {
		return true, fmt.Errorf("channel %d: record %d (put %d): %w", c.idx, idx, c.put, ErrNotSubmitted)
	}
	// get first: the host publishes the error before advancing get past
	// the failing record, so a passed get implies its error is visible.
	get := c.Get()
	if code, at := c.Err(); code != abi.OK && int32(idx-at) >= 0 {
		return true, &ChannelError{Channel: c.idx, Code: code, Index: at}
	}
	if int32(c.put-get) < 0 {
		return true, fmt.Errorf("channel %d: get %d, put %d: %w", c.idx, get, c.put, ErrProtocol)
	}
	return int32(get-(idx+1)) >= 0, nil
}

// Wait waits until record idx completes, the channel fails at or before it
// (a *ChannelError), or ctx ends: it polls, or sleeps until the host signals
// (see Poll). Records dropped by a Reset count as completed.
func (c *Channel) Wait(ctx context.Context, idx uint32) error {
	if !c.waitMade {
		c.waitDone = func() (bool, error) { return c.Done(c.waitIdx) }
		c.waitSleep = c.sleeper(func() uint32 { return c.waitIdx })
		c.waitMade = true
	}
	c.waitIdx = idx
	return c.poll.until(ctx, c.waitDone, c.waitSleep, &c.w)
}

// SetTrace has the channel's waits count into t (nil: no trace, the
// default): a diagnostic, see WaitTrace.
func (c *Channel) SetTrace(t *WaitTrace) { c.w.tr = t }

// Sleeps is how many times a wait of this channel slept until the host
// signalled (0 where the host cannot wake waiters: see Poll).
func (c *Channel) Sleeps() uint64 { return c.sleeps.Load() }

// sleeper is the channel's sleeper for a wait until get passes index(), or
// nil where the waiter polls.
// wakeRecheck bounds one sleep on the eventfd (see sleeper).
const wakeRecheck = 10 * time.Millisecond

func (c *Channel) sleeper(index func() uint32) sleeper {
	irq := c.d.irq
	if irq == nil || c.poll.NoWake {
		return nil
	}
	return func(ctx context.Context, cond func() (bool, error)) (bool, error) {
		vec := int(c.idx)
		// A signal left from a sleep that found its record done on the
		// second look would only wake this one early: drop it.
		if err := irq.ClearVector(vec); err != nil {
			return false, err
		}
		wake := c.desc + abi.ChWake
		// Sequentially consistent, as the host's store of get and load of
		// the word are: either the look below sees the completion, or the
		// host sees the word armed (abi.WakeDue).
		c.d.r.Store64(wake, abi.WakeWord(irq.ID(), index()))
		if done, err := cond(); done || err != nil {
			c.d.r.Store64(wake, 0)
			return done, err
		}
		c.sleeps.Add(1)
		for {
			// Armed, the waiter still looks every wakeRecheck: a signal
			// lost on the way (none is known; one was, a peer missing
			// from the server's set) costs that much, never the caller's
			// whole deadline.
			wctx, cancel := context.WithTimeout(ctx, wakeRecheck)
			err := irq.WaitVector(wctx, vec)
			cancel()
			if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				if done, cerr := cond(); done || cerr != nil {
					c.d.r.Store64(wake, 0)
					return done, cerr
				}
				continue
			}
			c.d.r.Store64(wake, 0)
			if cerr := ctx.Err(); err != nil && cerr != nil {
				// The caller's end, not the recheck's deadline that may
				// have come with it.
				return false, cerr
			}
			if err != nil {
				return false, err
			}
			return cond()
		}
	}
}

// Sync submits nothing and waits until every record submitted so far has
// completed.
func (c *Channel) Sync(ctx context.Context) error {
	if c.put == c.Get() {
		return nil
	}
	return c.Wait(ctx, c.put-1)
}

// Reset asks the host to clear the channel's error: the host drops the
// records it has not forwarded, sets get to put, clears the error and
// acknowledges. Reset waits for the acknowledgement.
func (c *Channel) Reset(ctx context.Context) error {
	want := c.load32(abi.ChReset) + 1
	c.d.r.Store32(c.desc+abi.ChReset, want)
	if err := c.d.Doorbell(int(c.idx)); err != nil {
		return err
	}
	// The host publishes the acknowledgement with get: sleep until any
	// publication (an index before the get seen).
	err := c.poll.until(ctx, func() (bool, error) {
		return c.load32(abi.ChResetAck) == want, nil
	}, c.sleeper(func() uint32 { return c.Get() - 1 }), &c.w)
	if err != nil {
		return fmt.Errorf("resetting channel %d: %w", c.idx, err)
	}
	return nil
}
