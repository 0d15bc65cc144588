package syscalls

import (
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
)

// FuzzForwarderSlots publishes arbitrary slot bytes as READY and checks that
// the forwarder answers or leaves every one (never panics, never leaves one
// PROCESSING) and closes promptly.
func FuzzForwarderSlots(f *testing.F) {
	var seed [4 * abi.SyscallSlotSize]byte
	abi.EncodeSlot(seed[:], abi.Slot{Number: abi.SysNull, Flags: abi.SysFlagBlocking})
	abi.EncodeSlot(seed[abi.SyscallSlotSize:], abi.Slot{Number: 0xffff, Flags: abi.SysFlagFastcall | abi.SysFlagBlocking})
	abi.EncodeSlot(seed[2*abi.SyscallSlotSize:], abi.Slot{Number: abi.SysFastcallRevoke, Args: [6]uint64{1 << 40}})
	f.Add(seed[:])
	f.Fuzz(func(t *testing.T, raw []byte) {
		r := newRig(t, DefaultConfig(), false)
		n := min(len(raw)/abi.SyscallSlotSize, 4)
		for i := range n {
			s, _ := abi.DecodeSlot(append([]byte(nil), raw[i*abi.SyscallSlotSize:(i+1)*abi.SyscallSlotSize]...))
			r.publish(uint32(i), s)
		}
		deadline := time.Now().Add(5 * time.Second)
		for i := range n {
			for {
				st, _ := r.state(uint32(i))
				if st == abi.SlotFinished || st == abi.SlotFree {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("slot %d stuck %v", i, st)
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		closePromptly(t, r.f)
	})
}

// FuzzHostileProxy runs the forwarder against a compromised proxy that
// forges results (fake_test.go's scribble) and checks that the forwarder
// stays in bounds, never writes a slot that has no call in flight, and
// closes promptly.
func FuzzHostileProxy(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newHostileRig(t, DefaultConfig(), false, data)
		// Slot 2 holds a call in flight; slot 3 is the guest's, FREE, with
		// bytes of its own that must stay.
		r.publish(2, abi.Slot{Seq: 0, Number: abi.SysClose, Flags: abi.SysFlagBlocking})
		var mine [abi.SyscallSlotSize]byte
		for i := range mine {
			mine[i] = byte(i)
		}
		mine[0], mine[1], mine[2], mine[3] = 0, 0, 0, 0 // state FREE, seq 0
		r.area.CopyIn(abi.SlotOff(3)+4, mine[4:])
		time.Sleep(5 * time.Millisecond)
		var now [abi.SyscallSlotSize]byte
		r.area.CopyOut(now[4:], abi.SlotOff(3)+4)
		if st, _ := r.state(3); now != mine || st != abi.SlotFree {
			t.Fatalf("a FREE slot was written: %x", now)
		}
		closePromptly(t, r.f)
		// Finished (answered, or EIO at Close), or never taken: a forged
		// request head reads as a full ring and calls wait in their slots.
		if st, _ := r.state(2); st != abi.SlotFinished && st != abi.SlotReady {
			t.Fatalf("slot 2 %v after Close, want finished or ready", st)
		}
	})
}

// closePromptly closes f, failing t if that takes more than 5 s.
func closePromptly(t *testing.T, f *Forwarder) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f.Close() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs")
	}
}

// FuzzForwarderRing publishes arbitrary request ring entries (their tags
// made right, so the poller reads them) and checks that the forwarder never
// panics, never answers into a slot the entry could not name, and closes
// promptly.
func FuzzForwarderRing(f *testing.F) {
	var seed [3 * abi.SyscallRingEntrySize]byte
	abi.EncodeRingEntry(seed[:], abi.RingEntry{Slot: 1, Call: abi.Slot{Number: abi.SysNull, Flags: abi.SysFlagBlocking}})
	abi.EncodeRingEntry(seed[abi.SyscallRingEntrySize:], abi.RingEntry{Slot: 1 << 30, Call: abi.Slot{Number: abi.SysNull}})
	abi.EncodeRingEntry(seed[2*abi.SyscallRingEntrySize:], abi.RingEntry{Slot: 2, Call: abi.Slot{Number: 0xffff, Flags: abi.SysFlagFastcall}})
	f.Add(seed[:])
	f.Fuzz(func(t *testing.T, raw []byte) {
		r := newRig(t, DefaultConfig(), false)
		n := min(len(raw)/abi.SyscallRingEntrySize, 4)
		for pos := range uint64(n) {
			b := append([]byte(nil), raw[pos*abi.SyscallRingEntrySize:(pos+1)*abi.SyscallRingEntrySize]...)
			b[0], b[1], b[2], b[3] = 0, 0, 0, 0
			r.area.CopyIn(abi.RingEntryOff(rigSlots, pos), b)
			r.area.Store32(abi.RingEntryOff(rigSlots, pos)+abi.RingTag, uint32(pos+1))
		}
		deadline := time.Now().Add(5 * time.Second)
		for r.f.Stats().Ring < uint64(n) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d entries read", r.f.Stats().Ring, n)
			}
			time.Sleep(100 * time.Microsecond)
		}
		closePromptly(t, r.f)
	})
}
