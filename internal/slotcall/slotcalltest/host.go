// Package slotcalltest is a fake host side of the syscall-slot protocol for
// tests: a goroutine that scans a syscall area for READY slots and reads its
// request ring (abi.FeatureSyscallRing) in order, copies and validates each
// call as the mediator does (abi.DecodeSlot, abi.DecodeRingEntry), and
// answers it with a function of the test's.
package slotcalltest

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/internal/slotcall"
)

// ServeFunc answers one call taken from slot i. A blocking call's result is
// written back; a non-blocking call's is dropped.
type ServeFunc func(i uint32, s abi.Slot) slotcall.Result

// Options tune a Host. The zero value serves every READY slot as soon as it
// is seen.
type Options struct {
	// Batch holds calls until at least Batch slots are READY at once, or the
	// oldest has waited BatchWait (default 2s): a way to see callers run
	// concurrently.
	Batch     int
	BatchWait time.Duration
	// Delay is slept before answering each call.
	Delay time.Duration
}

// Host serves a syscall area until Stop.
type Host struct {
	r     *shm.Region
	off   uint64
	slots uint32
	serve ServeFunc
	o     Options
	stop  chan struct{}
	done  sync.WaitGroup

	served, nonBlocking, rejected atomic.Int64
	maxReady                      atomic.Int64
	ring                          atomic.Int64
	head                          uint64 // the request ring's next position (loop's)
}

// Start serves area (a whole syscall area, as slotcall.New takes) with
// serve until Stop.
func Start(area []byte, serve ServeFunc, o Options) *Host {
	h := &Host{r: shm.New(area), slots: slotcall.SlotsIn(len(area)), serve: serve, o: o, stop: make(chan struct{})}
	if h.o.BatchWait == 0 {
		h.o.BatchWait = 2 * time.Second
	}
	h.done.Add(1)
	go h.loop()
	return h
}

// Stop ends serving and waits for the host's goroutine.
func (h *Host) Stop() {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	h.done.Wait()
}

// Served is the number of calls taken (blocking and not); NonBlocking the
// non-blocking ones among them; Rejected those DecodeSlot refused (answered
// with its errno, or dropped when non-blocking); MaxReady the most slots
// seen READY in one scan.
func (h *Host) Served() int64      { return h.served.Load() }
func (h *Host) NonBlocking() int64 { return h.nonBlocking.Load() }
func (h *Host) Rejected() int64    { return h.rejected.Load() }
func (h *Host) MaxReady() int64    { return h.maxReady.Load() }

// Ring is the number of calls read from the request ring (counted in Served
// too).
func (h *Host) Ring() int64 { return h.ring.Load() }

func (h *Host) loop() {
	defer h.done.Done()
	var ready []uint32
	var since time.Time
	for idle := 0; ; {
		select {
		case <-h.stop:
			return
		default:
		}
		ringed := h.drainRing()
		ready = h.scan(ready[:0])
		if ringed > 0 {
			idle = 0
		}
		if int64(len(ready)) > h.maxReady.Load() {
			h.maxReady.Store(int64(len(ready)))
		}
		if len(ready) == 0 {
			since = time.Time{}
			idle++
			if idle > 100 {
				time.Sleep(20 * time.Microsecond)
			}
			continue
		}
		idle = 0
		if since.IsZero() {
			since = time.Now()
		}
		if len(ready) < h.o.Batch && time.Since(since) < h.o.BatchWait {
			time.Sleep(10 * time.Microsecond)
			continue
		}
		since = time.Time{}
		for _, i := range ready {
			h.take(i)
		}
	}
}

// drainRing serves the request ring's ready entries from the head, in
// order, and returns how many.
func (h *Host) drainRing() int {
	n := 0
	for {
		off := h.off + abi.RingEntryOff(int(h.slots), h.head)
		if h.r.Load32(off+abi.RingTag) != uint32(h.head+1) {
			return n
		}
		// The copy, each word loaded once, as the mediator's ring reader
		// makes it: the guest may write the entry again under it (its
		// next lap), and the tag below says so.
		var w [abi.SyscallRingEntrySize / 8]uint64
		for i := range w {
			w[i] = h.r.Load64(off + 8*uint64(i))
		}
		var e abi.RingEntry
		errno := abi.DecodeRingWords(&w, h.slots, &e)
		if e.Tag != uint32(h.head+1) {
			return n
		}
		h.head++
		n++
		h.ring.Add(1)
		if errno == abi.ErrnoFAULT {
			h.rejected.Add(1)
			continue
		}
		base := h.off + abi.SlotOff(e.Slot)
		processing := abi.SlotWord(abi.SlotProcessing, e.Call.Seq)
		if !e.Call.Blocking() {
			// Freed before it is counted: a test that waits for the count
			// then reads the slot.
			h.r.CompareAndSwap32(base, processing, abi.SlotWord(abi.SlotFree, abi.NextSeq(e.Call.Seq)))
			h.served.Add(1)
			h.nonBlocking.Add(1)
			if errno == 0 {
				h.serve(e.Slot, e.Call)
			} else {
				h.rejected.Add(1)
			}
			continue
		}
		h.served.Add(1)
		h.finish(base, e.Slot, e.Call, errno)
	}
}

func (h *Host) scan(ready []uint32) []uint32 {
	for i := range h.slots {
		if st, _ := abi.SplitSlotWord(h.r.Load32(h.off + abi.SlotOff(i))); st == abi.SlotReady {
			ready = append(ready, i)
		}
	}
	return ready
}

// take copies slot i out, validates the copy and serves it.
func (h *Host) take(i uint32) {
	base := h.off + abi.SlotOff(i)
	var b [abi.SyscallSlotSize]byte
	for w := uint64(0); w < abi.SyscallSlotSize; w += 8 {
		v := h.r.Load64(base + w)
		for k := range uint64(8) {
			b[w+k] = byte(v >> (8 * k))
		}
	}
	s, errno := abi.DecodeSlot(b[:])
	if s.State != abi.SlotReady {
		return
	}
	word := abi.SlotWord(abi.SlotReady, s.Seq)
	if !s.Blocking() {
		if h.r.CompareAndSwap32(base, word, abi.SlotWord(abi.SlotFree, abi.NextSeq(s.Seq))) {
			h.served.Add(1)
			h.nonBlocking.Add(1)
			if errno == 0 {
				h.serve(i, s)
			} else {
				h.rejected.Add(1)
			}
		}
		return
	}
	if !h.r.CompareAndSwap32(base, word, abi.SlotWord(abi.SlotProcessing, s.Seq)) {
		return
	}
	h.served.Add(1)
	h.finish(base, i, s, errno)
}

// finish serves the PROCESSING blocking call s of slot i (at base), whose
// decoding gave errno, and writes its result.
func (h *Host) finish(base uint64, i uint32, s abi.Slot, errno abi.Errno) {
	res := slotcall.Result{Ret: -1, Errno: errno}
	if errno == 0 {
		if h.o.Delay > 0 {
			time.Sleep(h.o.Delay)
		}
		res = h.serve(i, s)
	} else {
		h.rejected.Add(1)
	}
	h.r.Store64(base+abi.SysRet, uint64(res.Ret))
	h.r.Store64(base+abi.SysErrno, uint64(res.Errno))
	h.r.Store32(base+abi.SysFinErrno, uint32(res.Errno)) // FeatureResultWord: with the state word
	h.r.CompareAndSwap32(base, abi.SlotWord(abi.SlotProcessing, s.Seq), abi.SlotWord(abi.SlotFinished, s.Seq))
}
