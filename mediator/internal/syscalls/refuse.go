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
	r := ringRefuser{area: area, slots: slots, head: head}
	for idle := 0; ; {
		select {
		case <-stop:
			return
		default:
		}
		if refuseOnce(area, slots)+r.once() > 0 {
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

// ringRefuser answers the request ring's calls with EIO.
type ringRefuser struct {
	area    *shm.Region
	slots   int
	head    uint64
	stallAt time.Time // when the head was found not written with a later entry ready
}

// once answers the ring's ready entries from the head and says how many.
func (r *ringRefuser) once() int {
	n := 0
	for {
		off := abi.RingEntryOff(r.slots, r.head)
		if r.area.Load32(off+abi.RingTag) != uint32(r.head+1) {
			if r.holeSkipped() {
				continue
			}
			return n
		}
		var w [ringWords]uint64
		for i := range w {
			w[i] = r.area.Load64(off + 8*uint64(i))
		}
		var e abi.RingEntry
		errno := abi.DecodeRingWords(&w, uint32(r.slots), &e)
		if e.Tag != uint32(r.head+1) {
			return n
		}
		r.head++
		r.stallAt = time.Time{}
		n++
		switch s := &e.Call; {
		case errno == abi.ErrnoFAULT:
		case !s.Blocking():
			r.area.CompareAndSwap32(abi.SlotOff(e.Slot)+abi.SysState,
				abi.SlotWord(abi.SlotProcessing, s.Seq), abi.SlotWord(abi.SlotFree, abi.NextSeq(s.Seq)))
		default:
			proxyproto.CompleteSlot(r.area, e.Slot, s.Seq, -1, abi.ErrnoIO)
		}
	}
}

// holeSkipped skips a head entry not written for abi.SyscallRingHoleNs
// while one of the next ones is ready.
func (r *ringRefuser) holeSkipped() bool {
	later := false
	for k := uint64(1); k <= ringLookAhead && k < uint64(r.slots); k++ {
		if r.area.Load32(abi.RingEntryOff(r.slots, r.head+k)+abi.RingTag) == uint32(r.head+k+1) {
			later = true
			break
		}
	}
	switch {
	case !later:
		r.stallAt = time.Time{}
		return false
	case r.stallAt.IsZero():
		r.stallAt = time.Now()
		return false
	case time.Since(r.stallAt) < abi.SyscallRingHoleNs:
		return false
	}
	r.head++
	r.stallAt = time.Time{}
	return true
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
