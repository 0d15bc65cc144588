package syscalls

import (
	"runtime"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// Refuse answers every call published in a closed forwarder's area with
// EIO until stop is closed: a VM being torn down after its forwarder runs it
// while the GPU drains, so that a kernel still making calls gets an error
// and ends instead of waiting forever for a result (and holding the drain).
// It treats the area as Forwarder does: the state word decides, a slot the
// guest rewrote is left alone; the request ring is read on from head (the
// closed forwarder's RingHead), in order, a claimed entry never written
// skipped as the forwarder skips it.
func Refuse(area *shm.Region, slots int, head uint64, stop <-chan struct{}) {
	r := newRingReader(area, slots, head)
	start := time.Now()
	for idle := 0; ; {
		select {
		case <-stop:
			return
		default:
		}
		if refuseOnce(area, slots)+refuseRing(area, r, int64(time.Since(start))+1) > 0 {
			idle = 0
		} else {
			idle++
		}
		if idle < 1000 {
			runtime.Gosched()
			continue
		}
		// Nothing for a while: every 100 µs (later than that on a
		// machine whose timers are late) until stop.
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// refuseRing answers the request ring's ready calls from r's head with EIO
// (blocking: in their slots; non-blocking: their slots freed), skipping a
// claimed entry never written as the forwarder does, and says how many.
func refuseRing(area *shm.Region, r *ringReader, now int64) int {
	n := 0
	for {
		e, errno, ok := r.next()
		if !ok {
			if skipped, _ := r.skipHole(now); skipped {
				continue
			}
			return n
		}
		n++
		switch s := &e.Call; {
		case errno == abi.ErrnoFAULT:
		case !s.Blocking():
			area.CompareAndSwap32(abi.SlotOff(e.Slot)+abi.SysState,
				abi.SlotWord(abi.SlotProcessing, s.Seq), abi.SlotWord(abi.SlotFree, abi.NextSeq(s.Seq)))
		default:
			proxyproto.CompleteSlot(area, e.Slot, s.Seq, -1, abi.ErrnoIO)
		}
	}
}

// refuseOnce answers the READY slots of one pass and says how many.
func refuseOnce(area *shm.Region, slots int) int {
	n := 0
	for i := range uint32(slots) {
		off := abi.SlotOff(i)
		w := area.Load32(off + abi.SysState)
		st, seq := abi.SplitSlotWord(w)
		if st != abi.SlotReady {
			continue
		}
		flags := area.Load32(off+abi.SysNumber) >> 16 & 0xff // the u8 flags at SysFlags
		if flags&uint32(abi.SysFlagBlocking) == 0 {
			area.CompareAndSwap32(off+abi.SysState, w, abi.SlotWord(abi.SlotFree, abi.NextSeq(seq)))
			n++
			continue
		}
		if !area.CompareAndSwap32(off+abi.SysState, w, abi.SlotWord(abi.SlotProcessing, seq)) {
			continue
		}
		proxyproto.CompleteSlot(area, i, seq, -1, abi.ErrnoIO)
		n++
	}
	return n
}
