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
		done := make(chan error, 1)
		go func() { done <- r.f.Close() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Close hangs")
		}
	})
}
