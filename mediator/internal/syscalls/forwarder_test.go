package syscalls

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

func TestBlockingCallRoundTrip(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	for i := range 3 {
		ret, errno := r.call(5, abi.SysLseek, 0, 41)
		if ret != 42 || errno != 0 {
			t.Fatalf("call %d: ret %d errno %d, want 42, 0", i, ret, errno)
		}
	}
	if st, seq := r.state(5); st != abi.SlotFree || seq != 3 {
		t.Fatalf("slot 5 after 3 calls: %v seq %d, want free seq 3", st, seq)
	}
	s := r.f.Stats()
	if s.Calls["lseek"] != 3 || s.Errnos["OK"] != 3 || s.InFlight != 0 || s.ProxyState != "running" {
		t.Fatalf("stats %+v", s)
	}
}

func TestNonBlockingFreedAfterCopy(t *testing.T) {
	r := newRig(t, DefaultConfig(), true) // the proxy holds every call
	r.publish(7, abi.Slot{Seq: 9, Number: abi.SysWrite, Args: [6]uint64{1, 2, 3}})
	r.wait(7, abi.SlotFree)
	if _, seq := r.state(7); seq != 10 {
		t.Fatalf("freed with seq %d, want 10", seq)
	}
	r.hold <- struct{}{} // the proxy serves it; the result goes nowhere
	deadline := time.Now().Add(5 * time.Second)
	for len(r.proxy(0).requests()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := r.proxy(0).requests(); len(got) != 1 || got[0].Args[2] != 3 || got[0].Flags&abi.SysFlagBlocking != 0 {
		t.Fatalf("proxy got %+v", got)
	}
}

func TestMalformedSlotsAnsweredWithoutTheProxy(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	for _, tc := range []struct {
		name  string
		nr    uint16
		flags uint8
		want  abi.Errno
	}{
		{"unknown call", 999, 0, abi.ErrnoNOSYS},
		{"unknown flag", abi.SysNull, 0x80, abi.ErrnoINVAL},
		{"never registered fastcall", abi.FastcallNumber(3, 0), abi.SysFlagFastcall, abi.ErrnoBADF},
		{"revoke of nothing", abi.SysFastcallRevoke, 0, abi.ErrnoSTALE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if ret, errno := r.call(1, tc.nr, tc.flags); ret != -1 && tc.want != abi.ErrnoSTALE || errno != tc.want {
				t.Fatalf("ret %d errno %d, want errno %d", ret, errno, tc.want)
			}
		})
	}
	for _, q := range r.proxy(0).requests() {
		t.Errorf("the proxy saw %+v", q)
	}
}

func TestGuestRewritingASlotLosesOnlyItsResult(t *testing.T) {
	r := newRig(t, DefaultConfig(), true)
	r.publish(3, abi.Slot{Seq: 4, Number: abi.SysLseek, Flags: abi.SysFlagBlocking, Args: [6]uint64{10}})
	r.wait(3, abi.SlotProcessing)
	// While it is served: new arguments, and a forged READY state.
	r.area.Store64(abi.SlotOff(3)+abi.SysArgs, 666)
	r.area.Store32(abi.SlotOff(3)+abi.SysState, abi.SlotWord(abi.SlotReady, 4))
	r.wait(3, abi.SlotProcessing) // taken again, as a new call
	r.hold <- struct{}{}          // the first call
	r.hold <- struct{}{}          // the forged one, taken again as a new call
	r.wait(3, abi.SlotFinished)
	got := r.proxy(0).requests()
	if len(got) != 2 || got[0].Args[0] != 10 || got[1].Args[0] != 666 {
		t.Fatalf("proxy got %+v: want the first copy (10), then the forged call (666)", got)
	}
}

func TestProxyDeathFailsInflightWithEIOAndRestarts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RestartDelay = time.Millisecond
	r := newRig(t, cfg, true)
	r.publish(2, abi.Slot{Seq: 1, Number: abi.SysLseek, Flags: abi.SysFlagBlocking})
	r.wait(2, abi.SlotProcessing)
	deadline := time.Now().Add(5 * time.Second)
	for len(r.proxy(0).requests()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	r.proxy(0).theirs.Close() // the proxy dies holding the call
	if ret, errno := r.wait(2, abi.SlotFinished); ret != -1 || errno != abi.ErrnoIO {
		t.Fatalf("in-flight call: ret %d errno %d, want -1 EIO", ret, errno)
	}
	r.area.Store32(abi.SlotOff(2)+abi.SysState, abi.SlotWord(abi.SlotFree, 2))
	go func() {
		// The dead proxy's server still waits on its first call's hold.
		for range 2 {
			r.hold <- struct{}{}
		}
	}()
	if ret, errno := r.call(2, abi.SysLseek, 0, 1); ret != 2 || errno != 0 {
		t.Fatalf("after restart: ret %d errno %d", ret, errno)
	}
	if s := r.f.Stats(); s.ProxyRestarts != 1 || r.starts.Load() != 2 || s.Errnos["EIO"] != 1 {
		t.Fatalf("restarts %d, starts %d, errnos %v", s.ProxyRestarts, r.starts.Load(), s.Errnos)
	}
}

func TestFastcallRegisterRunRevoke(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	num, errno := r.call(0, abi.SysFastcallRegister, 0, uint64(abi.SysPread64), 3, 100, 5, 7)
	if errno != 0 || num < 0 {
		t.Fatalf("register: %d errno %d", num, errno)
	}
	for range 2 {
		n, errno := r.call(1, uint16(num), abi.SysFlagFastcall)
		if n != 5 || errno != 0 || string(r.heap[100:105]) != "fastc" {
			t.Fatalf("fastcall: %d errno %d heap %q", n, errno, r.heap[100:105])
		}
	}
	if _, errno := r.call(0, abi.SysFastcallRevoke, 0, uint64(num)); errno != 0 {
		t.Fatalf("revoke: errno %d", errno)
	}
	if _, errno := r.call(1, uint16(num), abi.SysFlagFastcall); errno != abi.ErrnoSTALE {
		t.Fatalf("revoked fastcall: errno %d, want ESTALE", errno)
	}
	// The entry is reused with a new generation; the old number stays stale.
	num2, _ := r.call(0, abi.SysFastcallRegister, 0, uint64(abi.SysPread64), 3, 200, 5, 0)
	if num2 == num {
		t.Fatalf("reused number %d", num2)
	}
	if _, errno := r.call(1, uint16(num), abi.SysFlagFastcall); errno != abi.ErrnoSTALE {
		t.Fatalf("old number after reuse: errno %d, want ESTALE", errno)
	}
	if n, errno := r.call(1, uint16(num2), abi.SysFlagFastcall); n != 5 || errno != 0 || string(r.heap[200:205]) != "hello" {
		t.Fatalf("new fastcall: %d errno %d %q", n, errno, r.heap[200:205])
	}
}

func TestGetrusageGetsTheVMsGPUTime(t *testing.T) {
	r := newRig(t, DefaultConfig(), false)
	r.gpuNs.Store(123456)
	if ret, _ := r.call(0, abi.SysGetrusage, 0); ret != 123456 {
		t.Fatalf("getrusage aux %d", ret)
	}
}

func TestCoalescingWindowBatches(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Window = 50 * time.Millisecond
	r := newRig(t, cfg, false)
	time.Sleep(20 * time.Millisecond) // the proxy is up
	before := r.f.Stats().Batches
	for i := range uint32(10) {
		r.publish(i, abi.Slot{Number: abi.SysNull, Flags: abi.SysFlagBlocking})
	}
	for i := range uint32(10) {
		r.wait(i, abi.SlotFinished)
	}
	if b := r.f.Stats().Batches - before; b > 2 {
		t.Fatalf("10 calls within the window went in %d batches", b)
	}
	if err := r.f.SetConfig(Config{Batch: 0}); err == nil || !strings.Contains(err.Error(), "batch") {
		t.Fatalf("SetConfig(batch 0) = %v", err)
	}
}

// A proxy of another protocol version is refused (and restarted, and
// refused again): no rings are handed to it, no call goes its way.
func TestRefusesOtherProtocolVersion(t *testing.T) {
	f, err := New(Spec{
		Name: "old", Area: shm.New(make([]byte, abi.SyscallAreaSize(rigSlots))), Slots: rigSlots,
		GPUNs: func() uint64 { return 0 },
		Start: func() (Proxy, error) {
			a, b := seqpacketPair(t)
			ready := proxyproto.AppendReady(nil, 7)
			ready[2], ready[3] = 1, 0 // version 1: datagrams, no rings
			b.Write(ready)
			return &fakeProxy{mine: a, theirs: b, pid: 7}, nil
		},
	}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(f.Stats().ProxyState, "protocol 1") {
		if time.Now().After(deadline) {
			t.Fatalf("proxy state %q, want a refusal of protocol 1", f.Stats().ProxyState)
		}
		time.Sleep(time.Millisecond)
	}
}

// The diagnostic switch: null calls answered by the poller, never sent to
// the proxy; every other call still is.
func TestNullHereDiagnostic(t *testing.T) {
	t.Setenv(NullHereEnv, "1")
	r := newRig(t, DefaultConfig(), false)
	if ret, errno := r.call(1, abi.SysNull, 0); ret != 0 || errno != 0 {
		t.Fatalf("null: %d %d", ret, errno)
	}
	if s := r.f.Stats(); s.Batches != 0 || s.Calls["null"] != 1 {
		t.Fatalf("null went to the proxy: %+v", s)
	}
	if ret, errno := r.call(2, abi.SysLseek, 0, 41); ret != 42 || errno != 0 {
		t.Fatalf("lseek: %d %d", ret, errno)
	}
	if s := r.f.Stats(); s.Batches != 1 {
		t.Fatalf("lseek did not go to the proxy: %+v", s)
	}
}
