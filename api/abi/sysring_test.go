package abi

import "testing"

func TestRingEntryRoundTrip(t *testing.T) {
	e := RingEntry{Tag: 7, Slot: 3, Call: Slot{State: SlotProcessing, Seq: 0xabcdef, Number: SysPread64,
		Flags: SysFlagBlocking, Context: 9, Args: [6]uint64{1, 2, 3, 4, 5, 6}}}
	var b [SyscallRingEntrySize]byte
	EncodeRingEntry(b[:], e)
	got, errno := DecodeRingEntry(b[:], 4)
	if errno != 0 || got != e {
		t.Fatalf("DecodeRingEntry = %+v, %d; want %+v", got, errno, e)
	}
	if w := CallWord(&got.Call); w != uint32(SysPread64)|uint32(SysFlagBlocking)<<16|9<<24 {
		t.Errorf("CallWord = %#x", w)
	}
}

func TestDecodeRingEntryRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		e     RingEntry
		bytes func(b []byte)
		want  Errno
	}{
		{"slot past the area", RingEntry{Slot: 4, Call: Slot{Number: SysNull}}, nil, ErrnoFAULT},
		{"sequence past 24 bits", RingEntry{Call: Slot{Number: SysNull}}, func(b []byte) { b[RingSeq+3] = 1 }, ErrnoFAULT},
		{"unknown call", RingEntry{Call: Slot{Number: 0x3ff}}, nil, ErrnoNOSYS},
		{"unknown flag", RingEntry{Call: Slot{Number: SysNull, Flags: 4}}, nil, ErrnoINVAL},
		{"fastcall numbers are not calls", RingEntry{Call: Slot{Number: 0xffff, Flags: SysFlagFastcall}}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b [SyscallRingEntrySize]byte
			EncodeRingEntry(b[:], tc.e)
			if tc.bytes != nil {
				tc.bytes(b[:])
			}
			if _, errno := DecodeRingEntry(b[:], 4); errno != tc.want {
				t.Fatalf("errno %d, want %d", errno, tc.want)
			}
		})
	}
}

func TestRingEntryOff(t *testing.T) {
	if got, want := RingEntryOff(64, 0), uint64(PageSize+64*SyscallSlotSize); got != want {
		t.Errorf("entry 0 at %d, want %d", got, want)
	}
	if RingEntryOff(64, 65) != RingEntryOff(64, 1) {
		t.Error("position 65 of a 64-entry ring is not entry 1")
	}
	if end := RingEntryOff(64, 63) + SyscallRingEntrySize; end != SyscallAreaSize(64) {
		t.Errorf("the last entry ends at %d, the area at %d", end, SyscallAreaSize(64))
	}
}

func FuzzDecodeRingEntry(f *testing.F) {
	var b [SyscallRingEntrySize]byte
	EncodeRingEntry(b[:], RingEntry{Tag: 1, Slot: 2, Call: Slot{Number: SysOpenat, Flags: SysFlagBlocking}})
	f.Add(b[:], uint32(1024))
	f.Fuzz(func(t *testing.T, raw []byte, slots uint32) {
		if len(raw) < SyscallRingEntrySize {
			return
		}
		e, errno := DecodeRingEntry(raw, slots)
		if errno != 0 {
			return
		}
		c := e.Call
		if e.Slot >= slots || c.State != SlotProcessing || c.Seq > SlotSeqMask || c.Flags&^sysFlagsKnown != 0 ||
			(!c.Fastcall() && LookupCall(c.Number) == nil) {
			t.Fatalf("accepted %+v", e)
		}
		var again [SyscallRingEntrySize]byte
		EncodeRingEntry(again[:], e)
		if string(again[:]) != string(raw[:SyscallRingEntrySize]) {
			t.Fatal("an accepted entry does not re-encode to its bytes")
		}
	})
}
