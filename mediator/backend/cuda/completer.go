package cuda

import (
	"runtime"
	"sync/atomic"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// delivery is a completion on its way to its VM.
type delivery struct {
	vm *cudaVM
	c  backend.Completion
}

// idleSpin is how long the completer keeps spinning once nothing is
// outstanding, before it parks.
const idleSpin = 2_000_000

// completer delivers completions: it sweeps the channels' end markers while
// anything is outstanding and sleeps otherwise.
func (b *Backend) completer() {
	defer close(b.stopped)
	var out []delivery
	busyAt := b.now()
	for {
		if b.outstanding.Load() == 0 {
			if b.now()-busyAt < idleSpin {
				// A guest that waits for a completion to submit its next
				// command comes back within microseconds: waking a parked
				// goroutine would take longer than its work's start.
				runtime.Gosched()
				continue
			}
			select {
			case <-b.wake:
			case <-b.stop:
				return
			}
			continue
		}
		select {
		case <-b.stop:
			return
		default:
		}
		busyAt = b.now()
		out = b.sweep(out[:0])
		for _, d := range out {
			d.vm.complete(d.c)
			if d.vm.undelivered.Add(-1) == 0 {
				select {
				case d.vm.drained <- struct{}{}:
				default:
				}
			}
			b.outstanding.Add(-1)
		}
		if len(out) == 0 {
			runtime.Gosched()
		}
	}
}

// sweep collects the completions that are due, in each channel's order.
func (b *Backend) sweep(out []delivery) []delivery {
	b.sweeping.RLock()
	defer b.sweeping.RUnlock()
	for _, ch := range *b.chans.Load() {
		out = ch.sweep(out)
	}
	return out
}

func (ch *channel) sweep(out []delivery) []delivery {
	v, b := ch.vm, ch.vm.b
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.q) == 0 {
		return out
	}
	now := b.now()
	end := atomic.LoadUint64(ch.word(offEnd))
	fault, closing := v.Fault(), v.closing.Load()
	n := 0
	for ; n < len(ch.q); n++ {
		it := &ch.q[n]
		c := backend.Completion{Channel: ch.idx, Tag: it.tag, Op: it.op, Code: it.code}
		switch {
		case it.seq == 0: // never went to the GPU
		case it.seq <= end:
			if it.endAt == 0 {
				it.endAt = now
			}
			if it.op == abi.OpThrottle && it.code == abi.OK && !ch.takeRecord(it.seq, now-it.endAt) {
				goto stop // its record is on its way: the next sweep
			}
			c.Start, c.End = ch.startOf(it), it.endAt
			ch.lastEnd = it.endAt
		case fault != nil:
			c.Code = abi.ErrDevice
		case closing:
			c.Code = abi.ErrShutdown
		default:
			goto stop
		}
		out = append(out, delivery{vm: v, c: c})
	}
stop:
	if n > 0 {
		ch.q = ch.q[n:]
		ch.quietFrom = now
		if len(ch.q) == 0 {
			ch.q = nil
		}
	}
	if len(ch.q) == 0 {
		return out
	}
	ch.noteStart(now)
	if now-ch.quietFrom >= b.stall && fault == nil {
		ch.quietFrom = now
		b.checkFault(v, ch)
	}
	return out
}

// recordWait is how long after a THROTTLE's end marker its record may take
// to show before it counts as lost.
const recordWait = 10_000_000

// takeRecord adds the THROTTLE seq's ground-truth record to the channel's
// totals. It reports false while the record has not arrived (its writes and
// the end marker take different paths to host memory) and waited < recordWait.
func (ch *channel) takeRecord(seq uint64, waited int64) bool {
	off := slotOff(seq)
	if atomic.LoadUint64(ch.word(off+24)) != seq {
		if waited < recordWait {
			return false
		}
		return true // lost: the ground truth goes without it
	}
	ch.truthNs.Add(int64(atomic.LoadUint64(ch.word(off))))
	ch.truthKernels.Add(1)
	return true
}

// startOf is when it started: when its start marker was seen, or else (it
// ran between two sweeps) when its channel could last have started it.
func (ch *channel) startOf(it *item) int64 {
	if ch.startSeq == it.seq {
		return ch.startAt
	}
	return max(it.submitAt, ch.lastEnd)
}

// noteStart records when the head's start marker was first seen. ch.mu is
// held and ch.q is not empty.
func (ch *channel) noteStart(now int64) {
	head := ch.q[0].seq
	if head == 0 || ch.startSeq == head {
		return
	}
	if atomic.LoadUint64(ch.word(offStart)) >= head {
		ch.startSeq, ch.startAt = head, now
	}
}

// checkFault asks a quiet channel's stream whether its context faulted.
func (b *Backend) checkFault(v *cudaVM, ch *channel) {
	err := b.inCtx(v.ctx, func() error { return b.d.StreamQuery(ch.stream) })
	if err != nil && err != errNotReady && sticky(err) {
		v.setFault(err)
	}
}

// ReadStatus is the LoGA status read: the channels whose command's start
// marker is ahead of its end marker run, since that was first seen; the
// channels with work outstanding are active.
func (b *Backend) ReadStatus(st *backend.Status) {
	b.sweeping.RLock()
	defer b.sweeping.RUnlock()
	st.Running, st.Active = st.Running[:0], st.Active[:0]
	now := b.now()
	st.Time = now
	for _, ch := range *b.chans.Load() {
		ch.mu.Lock()
		if len(ch.q) == 0 {
			ch.mu.Unlock()
			continue
		}
		ref := backend.ChannelRef{VM: ch.vm.id, Channel: ch.idx}
		st.Active = append(st.Active, ref)
		head := &ch.q[0]
		if head.seq != 0 && atomic.LoadUint64(ch.word(offEnd)) < head.seq {
			ch.noteStart(now)
			if ch.startSeq == head.seq {
				st.Running = append(st.Running, backend.Running{ChannelRef: ref, Engine: ch.engine, Since: ch.startAt})
			}
		}
		ch.mu.Unlock()
	}
}
