package proxyproto

import (
	"errors"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

func TestRoundTrip(t *testing.T) {
	reqs := []Request{{Slot: 3, Seq: 7, Number: 17, Flags: 1, Context: 2, Args: [6]uint64{1, 2, 3, 4, 5, 6}, Aux: 9}, {Slot: 1}}
	msg := AppendCalls(nil, reqs)
	if len(msg) != hdrSize+2*RequestSize {
		t.Fatalf("calls message of %d bytes", len(msg))
	}
	got, err := DecodeCalls(nil, msg)
	if err != nil || len(got) != 2 || got[0] != reqs[0] || got[1] != reqs[1] {
		t.Fatalf("DecodeCalls = %+v, %v", got, err)
	}
	res := []Result{{Slot: 3, Seq: 7, Ret: -1, Errno: 2}}
	rg, err := DecodeResults(nil, AppendResults(nil, res))
	if err != nil || len(rg) != 1 || rg[0] != res[0] {
		t.Fatalf("DecodeResults = %+v, %v", rg, err)
	}
	v, pid, err := DecodeReady(AppendReady(nil, 42))
	if err != nil || v != Version || pid != 42 {
		t.Fatalf("DecodeReady = %d %d %v", v, pid, err)
	}
}

func TestRefusesMalformed(t *testing.T) {
	msg := AppendCalls(nil, []Request{{}})
	for _, bad := range [][]byte{nil, msg[:len(msg)-1], append(msg, 0), AppendResults(nil, nil)} {
		if _, err := DecodeCalls(nil, bad); !errors.Is(err, ErrMessage) {
			t.Errorf("DecodeCalls(%d bytes) = %v, want ErrMessage", len(bad), err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(AppendCalls(nil, []Request{{Slot: 1}}))
	f.Add(AppendResults(nil, []Result{{Slot: 1}}))
	f.Add(AppendReady(nil, 1))
	f.Add(AppendRing(nil, RingLayout{ReqCap: 4, ResCap: 8}, AreaSpec{Slots: 16, Off: 4096}))
	f.Fuzz(func(t *testing.T, msg []byte) {
		if reqs, err := DecodeCalls(nil, msg); err == nil {
			if again := AppendCalls(nil, reqs); len(again) != len(msg) {
				t.Fatalf("re-encoded %d bytes from %d", len(again), len(msg))
			}
		}
		if res, err := DecodeResults(nil, msg); err == nil && len(AppendResults(nil, res)) != len(msg) {
			t.Fatal("results do not round trip in size")
		}
		_, _, _ = DecodeReady(msg)
		if l, size, a, err := DecodeRing(msg); err == nil {
			if l.Validate() != nil || size != l.Size() || a.Slots > abi.MaxSyscallSlots {
				t.Fatalf("DecodeRing accepted %+v %d %+v", l, size, a)
			}
			if l2, _, a2, err := DecodeRing(AppendRing(nil, l, a)); err != nil || l2 != l || a2 != a {
				t.Fatal("ring message does not round trip")
			}
		}
	})
}
