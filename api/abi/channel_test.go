package abi

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
)

func TestCheckPut(t *testing.T) {
	const n = 16
	const top = math.MaxUint32
	for _, tc := range []struct {
		name                string
		put, get, submitted uint32
		want                uint32
		code                ErrorCode
	}{
		{"empty", 0, 0, 0, 0, OK},
		{"some new", 5, 0, 0, 5, OK},
		{"exactly entries ahead", n, 0, 0, n, OK},
		{"one past full", n + 1, 0, 0, 0, ErrRingOverflow},
		{"some in flight", 5, 0, 3, 2, OK},
		{"all submitted", 3, 0, 3, 0, OK},
		{"full and all in flight", n, 0, n, 0, OK},
		{"put behind submitted", 2, 0, 3, 0, ErrRingOverflow},
		{"put one behind get", top, 0, 0, 0, ErrRingOverflow},
		{"put far behind get", 100, 1000, 1000, 0, ErrRingOverflow},
		{"wrap: get before 2^32, put after", 4, top - 7, top - 3, 8, OK},
		{"wrap: exactly entries ahead across 2^32", 0, top - n + 1, top - n + 1, n, OK},
		{"wrap: one past full across 2^32", 1, top - n + 1, top - n + 1, 0, ErrRingOverflow},
		{"wrap: all three after 2^32", 10, 2, 6, 4, OK},
		{"wrap: put at 2^32-1", top, top - 1, top - 1, 1, OK},
		{"submitted more than entries past get", n, 0, n + 1, 0, ErrRingOverflow},
		{"put huge", top / 2, 0, 0, 0, ErrRingOverflow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code := CheckPut(tc.put, tc.get, tc.submitted, n)
			if got != tc.want || code != tc.code {
				t.Errorf("CheckPut(%#x, %#x, %#x, %d) = %d, %v; want %d, %v", tc.put, tc.get, tc.submitted, n, got, code, tc.want, tc.code)
			}
		})
	}
}

func TestChannelStateString(t *testing.T) {
	for s, want := range map[ChannelState]string{
		ChannelIdle: "idle", ChannelBusy: "busy", ChannelHeld: "held", ChannelFailed: "failed",
		channelStateN: "unknown", math.MaxUint32: "unknown",
	} {
		if got := s.String(); got != want {
			t.Errorf("ChannelState(%d).String() = %q, want %q", s, got, want)
		}
	}
}

func TestErrorCodeStrings(t *testing.T) {
	seen := make(map[string]ErrorCode)
	for c := OK; c < errorCodeCount; c++ {
		s := c.String()
		if s == "" || strings.HasPrefix(s, "error ") {
			t.Errorf("code %d has no name", c)
		}
		if prev, dup := seen[s]; dup {
			t.Errorf("codes %d and %d are both %q", prev, c, s)
		}
		seen[s] = c
		if got := c.Error(); got != "channel error: "+s {
			t.Errorf("ErrorCode(%d).Error() = %q", c, got)
		}
	}
	if got := ErrorCode(errorCodeCount).String(); got != "error 13" {
		t.Errorf("ErrorCode(13).String() = %q", got)
	}
	if got := ErrorCode(math.MaxUint32).String(); got != "error 4294967295" {
		t.Errorf("ErrorCode(max).String() = %q", got)
	}
	if ErrHeapRange.String() != "heap range" || ErrDevice.String() != "device error" {
		t.Errorf("names: %q, %q", ErrHeapRange, ErrDevice)
	}
}

func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want ErrorCode
	}{
		{"nil", nil, OK},
		{"a code", ErrHeapRange, ErrHeapRange},
		{"wrapped", fmt.Errorf("copying: %w", ErrTooLong), ErrTooLong},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", ErrBadHandle)), ErrBadHandle},
		{"joined", errors.Join(io.EOF, ErrNoMemory), ErrNoMemory},
		{"other error", io.EOF, ErrDevice},
		{"layout error", ErrLayout, ErrDevice},
		{"unknown code", ErrorCode(99), ErrorCode(99)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CodeOf(tc.err); got != tc.want {
				t.Errorf("CodeOf(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
	if !errors.Is(fmt.Errorf("x: %w", ErrShutdown), ErrShutdown) {
		t.Error("errors.Is does not find a wrapped code")
	}
}

func TestSlotWord(t *testing.T) {
	for _, tc := range []struct {
		s    SlotState
		seq  uint32
		want uint32
	}{
		{SlotFree, 0, 0},
		{SlotReady, 1, 0x102},
		{SlotFinished, SlotSeqMask, 0xffffff04},
		{SlotProcessing, SlotSeqMask + 1, 0x03}, // the sequence wraps at 2^24
		{SlotPopulating, 0xabcdef12, 0xcdef1201},
	} {
		w := SlotWord(tc.s, tc.seq)
		if w != tc.want {
			t.Errorf("SlotWord(%v, %#x) = %#x, want %#x", tc.s, tc.seq, w, tc.want)
		}
		s, seq := SplitSlotWord(w)
		if s != tc.s || seq != tc.seq&SlotSeqMask {
			t.Errorf("SplitSlotWord(%#x) = %v, %#x", w, s, seq)
		}
	}
	if s, seq := SplitSlotWord(0xffffffff); s != 0xff || seq != SlotSeqMask {
		t.Errorf("SplitSlotWord(max) = %d, %#x", s, seq)
	}
	names := make(map[string]bool)
	for s := SlotFree; s < slotStateCount; s++ {
		if n := s.String(); n == "unknown" || names[n] {
			t.Errorf("slot state %d: name %q missing or repeated", s, n)
		} else {
			names[n] = true
		}
	}
	if SlotState(slotStateCount).String() != "unknown" {
		t.Error("state past the last has a name")
	}
	if SysArgs+SysArgCount*8 != SysCookie || SysCookie+8 != SyscallSlotSize {
		t.Error("slot fields do not tile the slot")
	}
}

func TestWakeWord(t *testing.T) {
	w := WakeWord(7, 100)
	if w&WakeArmed == 0 || w&WakePeerMask != 7 || uint32(w>>WakeIndexShift) != 100 || w&(0x7fff<<16) != 0 {
		t.Fatalf("WakeWord(7, 100) = %#x", w)
	}
	for _, tc := range []struct {
		w      uint64
		get    uint32
		failed bool
		due    bool
	}{
		{0, 1000, true, false},                // polling: never signalled
		{WakeWord(7, 100), 100, false, false}, // record 100 not done
		{WakeWord(7, 100), 101, false, true},
		{WakeWord(7, 100), 5000, false, true},
		{WakeWord(7, 100), 99, true, true},        // failed: wake to see the error
		{WakeWord(7, 0xffffffff), 0, false, true}, // wraps
		{WakeWord(7, 0xffffffff), 0xffffffff, false, false},
		{WakeWord(7, 100) &^ WakeArmed, 200, true, false}, // disarmed by the host's signal
	} {
		peer, due := WakeDue(tc.w, tc.get, tc.failed)
		if due != tc.due || (due && peer != 7) {
			t.Errorf("WakeDue(%#x, %d, %v) = %d, %v; want due %v", tc.w, tc.get, tc.failed, peer, due, tc.due)
		}
	}
}
