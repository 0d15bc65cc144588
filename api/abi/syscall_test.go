package abi

import "testing"

func TestSlotRoundTrip(t *testing.T) {
	s := Slot{State: SlotReady, Seq: 0xabcdef, Number: SysPread64, Flags: SysFlagBlocking, Context: 7, Args: [6]uint64{1, 2, 3, 4, 5, 6}, Cookie: 99}
	var b [SyscallSlotSize]byte
	EncodeSlot(b[:], s)
	got, errno := DecodeSlot(b[:])
	if errno != 0 || got != s {
		t.Fatalf("DecodeSlot = %+v, %d; want %+v", got, errno, s)
	}
}

func TestDecodeSlotRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Slot
		want Errno
	}{
		{"not ready", Slot{State: SlotPopulating, Number: SysNull}, ErrnoAGAIN},
		{"processing", Slot{State: SlotProcessing, Number: SysNull}, ErrnoAGAIN},
		{"unknown call", Slot{State: SlotReady, Number: 0x3ff}, ErrnoNOSYS},
		{"unknown flag", Slot{State: SlotReady, Number: SysNull, Flags: 4}, ErrnoINVAL},
		{"fastcall numbers are not calls", Slot{State: SlotReady, Number: 0xffff, Flags: SysFlagFastcall}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b [SyscallSlotSize]byte
			EncodeSlot(b[:], tc.s)
			if _, errno := DecodeSlot(b[:]); errno != tc.want {
				t.Fatalf("errno %d, want %d", errno, tc.want)
			}
		})
	}
}

func TestCallTableConsistent(t *testing.T) {
	seen := map[uint16]bool{}
	for i, c := range Calls {
		if seen[c.Number] || LookupCall(c.Number) != &Calls[i] || CallByName(c.Name) != &Calls[i] {
			t.Errorf("call %q (%d): duplicate or not found by number and name", c.Name, c.Number)
		}
		seen[c.Number] = true
		if i > 0 && Calls[i-1].Number >= c.Number {
			t.Errorf("calls out of number order at %q", c.Name)
		}
	}
	for idx := range uint32(MaxFastcalls) {
		for _, gen := range []uint32{0, 1, FastcallGenMask} {
			if i, g := SplitFastcall(FastcallNumber(idx, gen)); i != idx || g != gen {
				t.Fatalf("fastcall %d/%d round trips to %d/%d", idx, gen, i, g)
			}
		}
	}
}

func FuzzDecodeSlot(f *testing.F) {
	var b [SyscallSlotSize]byte
	EncodeSlot(b[:], Slot{State: SlotReady, Number: SysOpenat, Flags: SysFlagBlocking})
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) < SyscallSlotSize {
			return
		}
		s, errno := DecodeSlot(raw)
		if errno != 0 {
			return
		}
		if s.State != SlotReady || s.Flags&^sysFlagsKnown != 0 || (!s.Fastcall() && LookupCall(s.Number) == nil) {
			t.Fatalf("accepted %+v", s)
		}
		var again [SyscallSlotSize]byte
		EncodeSlot(again[:], s)
		if string(again[:]) != string(raw[:SyscallSlotSize]) {
			t.Fatal("an accepted slot does not re-encode to its bytes")
		}
	})
}
