package cuda

import "sync/atomic"

// handoff is the queue from the completer to the deliverer: one producer,
// one consumer, no lock. The completer's hand-off is part of the interval
// after a sweep that found completions, in which the next short kernel's
// start is seen (it comes a launch gap, about 2 µs on an H100, after the
// end that sweep found): a mutex, a slice header and a count, each a cache
// line the spinning deliverer last held, took about 0.4 µs of it. Here it
// writes the entries and one count, and wakes the deliverer only where it
// parked.
//
// The entries lie in chunks linked in order; the completer links a new one
// before it publishes an entry in it, and the deliverer hands each chunk
// it emptied back for reuse (spare), so that a steady stream of
// completions allocates nothing. The queue has no bound: the completer
// never waits for a slow callback.
type handoff struct {
	// The completer's.
	tail    *handoffChunk
	tailIdx int
	n       uint64 // completions pushed (pushed's value)
	_       [64]byte

	// pushed is the completions published: the completer's to write.
	// parked, the deliverer's, on the same line: it changes only when the
	// deliverer parks, and the completer reads it at every push.
	pushed atomic.Uint64
	parked atomic.Bool
	_      [48]byte
	// taken is the completions delivered: the deliverer's to write, after
	// each callback returned (inline delivery reads it).
	taken atomic.Uint64
	_     [56]byte

	// The deliverer's.
	head    *handoffChunk
	headIdx int
	spare   atomic.Pointer[handoffChunk] // an emptied chunk, for the completer
	wake    chan struct{}                // capacity 1
}

// handoffChunkLen is how many completions a chunk holds.
const handoffChunkLen = 128

type handoffChunk struct {
	d    [handoffChunkLen]delivery
	next atomic.Pointer[handoffChunk]
}

func newHandoff() *handoff {
	c := new(handoffChunk)
	return &handoff{tail: c, head: c, wake: make(chan struct{}, 1)}
}

// push publishes out, in order (the completer).
func (h *handoff) push(out []delivery) {
	for _, d := range out {
		if h.tailIdx == handoffChunkLen {
			c := h.spare.Swap(nil)
			if c == nil {
				c = new(handoffChunk)
			}
			h.tail.next.Store(c)
			h.tail, h.tailIdx = c, 0
		}
		h.tail.d[h.tailIdx] = d
		h.tailIdx++
	}
	h.n += uint64(len(out))
	h.pushed.Store(h.n)
	// Against park: each stores its own word, then loads the other's
	// (both sequentially consistent): one sees the other.
	if h.parked.Load() {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
}

// pending reports whether completions were pushed that the deliverer has
// not delivered yet (the completer).
func (h *handoff) pending() bool { return h.taken.Load() != h.n }

// pop takes the next completion, which the caller saw published (pushed
// past taken: the deliverer).
func (h *handoff) pop() delivery {
	if h.headIdx == handoffChunkLen {
		old := h.head
		h.head, h.headIdx = old.next.Load(), 0
		old.next.Store(nil)
		h.spare.Store(old)
	}
	d := h.head.d[h.headIdx]
	h.head.d[h.headIdx] = delivery{} // no VM kept alive by a delivered completion
	h.headIdx++
	return d
}

// park waits until something is pushed past taken, or stop closes
// (reported false: the deliverer).
func (h *handoff) park(taken uint64, stop <-chan struct{}) bool {
	h.parked.Store(true)
	defer h.parked.Store(false)
	for h.pushed.Load() == taken {
		select {
		case <-h.wake:
		case <-stop:
			return false
		}
	}
	return true
}
