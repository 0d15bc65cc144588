package slotcall

import (
	"fmt"
	"runtime"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
)

func (a *Area) stateOff(slot uint32) uint64 { return a.off + abi.SlotOff(slot) + abi.SysState }

// Claim waits until slot is FREE and takes it: FREE|s → POPULATING|s. Other
// callers sharing the slot take turns; one that finds it busy polls.
func (a *Area) Claim(slot uint32) (Ticket, error) {
	if slot >= a.slots {
		return Ticket{}, fmt.Errorf("claiming slot %d of %d: %w", slot, a.slots, ErrRange)
	}
	off := a.stateOff(slot)
	var p poller
	for {
		w := a.r.Load32(off)
		if st, seq := abi.SplitSlotWord(w); st == abi.SlotFree &&
			a.r.CompareAndSwap32(off, w, abi.SlotWord(abi.SlotPopulating, seq)) {
			return Ticket{Slot: slot, Seq: seq}, nil
		}
		if err := p.wait(a); err != nil {
			return Ticket{}, fmt.Errorf("claiming slot %d: %w", slot, err)
		}
	}
}

// Publish writes req into the claimed slot and makes it READY. Every field is
// stored before the state word, which is stored last (release); then the
// slot's ready hint is set (abi.FeatureReadyMap).
func (a *Area) Publish(t Ticket, req Request) {
	base := a.off + abi.SlotOff(t.Slot)
	a.r.Store32(base+abi.SysNumber, uint32(req.Number)|uint32(req.Flags)<<16|uint32(req.Context)<<24)
	for i, v := range req.Args {
		a.r.Store64(base+abi.SysArgs+8*uint64(i), v)
	}
	a.r.Store64(base+abi.SysCookie, req.Cookie)
	a.r.Store32(base+abi.SysState, abi.SlotWord(abi.SlotReady, t.Seq))
	a.setHint(t.Slot)
}

// setHint sets slot's ready-map byte, by compare-and-swap on its aligned
// word (the host clears the other bytes of the word concurrently).
func (a *Area) setHint(slot uint32) {
	off := a.off + abi.ReadyMapOff(slot)
	word, shift := off&^3, 8*(off&3)
	for {
		old := a.r.Load32(word)
		if old>>shift&0xff != 0 || a.r.CompareAndSwap32(word, old, old|1<<shift) {
			return
		}
	}
}

// Wait polls the published blocking call t until the host finishes it, reads
// the result and frees the slot (FREE|s+1). While the slot is READY|s or
// PROCESSING|s it waits; any other state than FINISHED|s is ErrLost (the slot
// is left as it is).
func (a *Area) Wait(t Ticket) (Result, error) {
	if t.Slot >= a.slots {
		return Result{}, fmt.Errorf("waiting on slot %d of %d: %w", t.Slot, a.slots, ErrRange)
	}
	off := a.stateOff(t.Slot)
	var p poller
	for {
		// The state word and, once FINISHED, the errno beside it
		// (abi.FeatureResultWord) in one load.
		w := a.r.Load64(off)
		st, seq := abi.SplitSlotWord(uint32(w))
		switch {
		case seq != t.Seq&abi.SlotSeqMask || (st != abi.SlotReady && st != abi.SlotProcessing && st != abi.SlotFinished):
			return Result{}, fmt.Errorf("waiting on slot %d seq %d: found %v seq %d: %w", t.Slot, t.Seq, st, seq, ErrLost)
		case st == abi.SlotFinished:
			base := a.off + abi.SlotOff(t.Slot)
			r := Result{Ret: int64(a.r.Load64(base + abi.SysRet)), Errno: abi.Errno(w >> 32)}
			a.r.Store32(off, abi.SlotWord(abi.SlotFree, abi.NextSeq(seq)))
			return r, nil
		}
		if err := p.wait(a); err != nil {
			return Result{}, fmt.Errorf("waiting on slot %d: %w", t.Slot, err)
		}
	}
}

// State reads slot's state word (for tests and statistics).
func (a *Area) State(slot uint32) (abi.SlotState, uint32) {
	return abi.SplitSlotWord(a.r.Load32(a.stateOff(slot)))
}

// Polling: spinPolls tight polls, then yieldPolls with runtime.Gosched, then
// sleeps from minSleep doubling to maxSleep. A GPU thread would spin; on a
// CPU with few cores, spinning goroutines would starve the host, so they
// yield. Yielding lasts long enough (tens of thousands of polls, a few
// milliseconds when other goroutines run) to cover a round trip through
// the mediator and the proxy: a sleep costs what the machine's timers make
// of it, about a millisecond here, whatever minSleep says.
const (
	spinPolls  = 64
	yieldPolls = 1 << 15
	minSleep   = time.Microsecond
	maxSleep   = 100 * time.Microsecond
)

// poller paces one wait.
type poller struct {
	n        int
	sleep    time.Duration
	deadline time.Time
}

// wait pauses before the next poll, or says why the wait ends.
func (p *poller) wait(a *Area) error {
	p.n++
	if p.n == 1 && a.timeout > 0 {
		p.deadline = time.Now().Add(a.timeout)
	}
	if p.n%16 == 0 || p.n > spinPolls {
		select {
		case <-a.stop:
			return ErrAborted
		default:
		}
		if !p.deadline.IsZero() && p.n%16 == 0 && time.Now().After(p.deadline) {
			return ErrTimeout
		}
	}
	switch {
	case p.n <= spinPolls:
	case p.n <= spinPolls+yieldPolls:
		runtime.Gosched()
	default:
		p.sleep = min(max(p.sleep*2, minSleep), maxSleep)
		if a.stop == nil {
			time.Sleep(p.sleep)
			return nil
		}
		t := time.NewTimer(p.sleep)
		defer t.Stop()
		select {
		case <-a.stop:
			return ErrAborted
		case <-t.C:
		}
	}
	return nil
}
