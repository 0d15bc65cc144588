package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// ringMediator plays the forwarder's part of the rings against an
// in-process Serve.
type ringMediator struct {
	t          *testing.T
	fd         int // the mediator's socket end, blocking
	rg         *proxyproto.Ring
	tail, head uint64
	kicks      int
	mem        []byte
	area       *shm.Region // the syscall area handed to the proxy, or nil
	records    int         // result records read
}

func newRingMediator(t *testing.T, cfg ServeConfig) *ringMediator {
	return newRingMediatorArea(t, cfg, 0)
}

// newRingMediatorArea hands the proxy a syscall area of slots (none for
// 0), at a page's offset in its memfd, as the forwarder does.
func newRingMediatorArea(t *testing.T, cfg ServeConfig, slots uint32) *ringMediator {
	med, prox := socketpair(t)
	heapFD, err := shm.NewMemfd("heap", 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	heap, err := shm.Map(heapFD, 1<<16) // a mapping: the race detector leaves it alone
	unix.Close(heapFD)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, prox, heap, cfg) }()
	raw, _ := med.SyscallConn()
	m := &ringMediator{t: t}
	_ = raw.Control(func(fd uintptr) { m.fd, _ = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) })
	_ = unix.SetNonblock(m.fd, false)
	t.Cleanup(func() {
		// End the proxy with an end of file: closing a socket that holds
		// unread kicks would reset its end instead.
		_ = unix.Shutdown(m.fd, unix.SHUT_WR)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		unix.Close(m.fd)
		med.Close()
		cancel()
		prox.Close()
	})
	buf := make([]byte, 64)
	if n, err := unix.Read(m.fd, buf); err != nil || proxyproto.Type(buf[:n]) != proxyproto.MsgReady {
		t.Fatalf("first message: %v %v", buf[:n], err)
	}
	l := proxyproto.RingLayout{ReqCap: 8, ResCap: 8}
	ringFD, err := shm.NewMemfd("rings", int64(l.Size()))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ringFD)
	mem, err := shm.Map(ringFD, l.Size())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shm.Unmap(mem) })
	m.mem = mem
	if m.rg, err = proxyproto.InitRing(mem, l); err != nil {
		t.Fatal(err)
	}
	fds, a := []int{ringFD}, proxyproto.AreaSpec{}
	if slots > 0 {
		size := 4096 + int(abi.SyscallAreaSize(int(slots)))
		areaFD, err := shm.NewMemfd("region", int64(size))
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(areaFD)
		region, err := shm.Map(areaFD, size)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { shm.Unmap(region) })
		m.area = shm.New(region[4096:])
		fds, a = append(fds, areaFD), proxyproto.AreaSpec{Slots: slots, Off: 4096}
	}
	if err := unix.Sendmsg(m.fd, proxyproto.AppendRing(nil, l, a), unix.UnixRights(fds...), nil, 0); err != nil {
		t.Fatal(err)
	}
	return m
}

// calls publishes reqs and waits for as many results, sleeping on the
// socket (announced) whenever the result ring is empty.
func (m *ringMediator) calls(reqs ...proxyproto.Request) map[uint32]proxyproto.Result {
	m.t.Helper()
	at := map[uint64]proxyproto.Request{} // what each position holds, for Bulk records
	for i := range reqs {
		m.rg.MediatorPutRequest(m.tail, &reqs[i])
		at[m.tail] = reqs[i]
		m.tail++
	}
	take := func(r proxyproto.Result, out map[uint32]proxyproto.Result) {
		m.records++
		if r.Delivery != proxyproto.Bulk {
			out[r.Slot] = r
			return
		}
		for i := range uint64(64) {
			if r.Mask>>i&1 != 0 {
				q := at[r.Pos+i]
				out[q.Slot] = proxyproto.Result{Slot: q.Slot, Seq: q.Seq, Delivery: proxyproto.Bulk}
			}
		}
	}
	if m.rg.MediatorPublish(m.tail) {
		m.kicks++
		if _, err := unix.Write(m.fd, []byte{proxyproto.MsgKick}); err != nil {
			m.t.Fatal(err)
		}
	}
	out := map[uint32]proxyproto.Result{}
	buf := make([]byte, 64)
	for len(out) < len(reqs) {
		if r, ok := m.rg.MediatorNextResult(m.head); ok {
			m.head++
			m.rg.MediatorConsumed(m.head)
			take(r, out)
			continue
		}
		m.rg.MediatorIdle(true)
		if r, ok := m.rg.MediatorNextResult(m.head); ok {
			m.head++
			m.rg.MediatorConsumed(m.head)
			take(r, out)
			m.rg.MediatorIdle(false)
			continue
		}
		tv := unix.NsecToTimeval((5 * time.Second).Nanoseconds())
		_ = unix.SetsockoptTimeval(m.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		n, err := unix.Read(m.fd, buf)
		for err == unix.EINTR {
			n, err = unix.Read(m.fd, buf)
		}
		if err != nil || n != 1 || buf[0] != proxyproto.MsgKick {
			le := binary.LittleEndian
			m.t.Fatalf("waiting for a kick with %d of %d results: %v %v (req tail %d head %d, proxy idle %d, mediator idle %d, result head %d, mark %d)",
				len(out), len(reqs), buf[:max(n, 0)], err, le.Uint64(m.mem[64:]), le.Uint64(m.mem[128:]), le.Uint32(m.mem[192:]), le.Uint32(m.mem[320:]), m.head,
				le.Uint64(m.mem[(proxyproto.RingHdrSize+8*proxyproto.RequestSize+63)&^63+int(m.head%8)*proxyproto.ResultStride:]))
		}
		m.rg.MediatorIdle(false)
	}
	return out
}

func TestServeRing(t *testing.T) {
	for _, spin := range []time.Duration{0, 200 * time.Microsecond} {
		t.Run(fmt.Sprintf("spin=%v", spin), func(t *testing.T) {
			m := newRingMediator(t, ServeConfig{Dir: t.TempDir(), Spin: spin, ContextSpin: spin})
			res := m.calls(
				proxyproto.Request{Slot: 0, Seq: 1, Number: abi.SysNull},
				proxyproto.Request{Slot: 1, Seq: 2, Number: abi.SysClockGet, Args: [6]uint64{unix.CLOCK_MONOTONIC, 64}},
				proxyproto.Request{Slot: 2, Seq: 3, Number: abi.SysNull, Context: 7},
				proxyproto.Request{Slot: 3, Seq: 4, Number: 0x3ff},
			)
			want := map[uint32]proxyproto.Result{
				0: {Slot: 0, Seq: 1},
				1: {Slot: 1, Seq: 2},
				2: {Slot: 2, Seq: 3},
				3: {Slot: 3, Seq: 4, Ret: -1, Errno: abi.ErrnoNOSYS},
			}
			for s, w := range want {
				if res[s] != w {
					t.Errorf("slot %d: %+v, want %+v", s, res[s], w)
				}
			}
			// Round trips one at a time, and batches that fill both rings:
			// no wakeup lost, no result lost.
			for i := range 300 {
				if r := m.calls(proxyproto.Request{Slot: 9, Seq: uint32(i), Number: abi.SysClockGet, Args: [6]uint64{unix.CLOCK_MONOTONIC, 64}}); r[9].Seq != uint32(i) || r[9].Errno != 0 {
					t.Fatalf("call %d: %+v", i, r)
				}
			}
			for i := range 50 {
				reqs := make([]proxyproto.Request, 8)
				for k := range reqs {
					reqs[k] = proxyproto.Request{Slot: uint32(k), Seq: uint32(i), Number: abi.SysClockGet, Args: [6]uint64{unix.CLOCK_MONOTONIC, 64}}
				}
				if r := m.calls(reqs...); len(r) != 8 {
					t.Fatalf("batch %d: %d results", i, len(r))
				}
			}
			t.Logf("spin %v: %d kicks for %d batches", spin, m.kicks, 351)
		})
	}
}

// With the syscall area, the proxy writes blocking calls' results into
// their slots itself and tells the mediator so; a slot the guest took back
// is left alone and reported refused; a non-blocking call's result is the
// mediator's to drop.
func TestServeRingWritesSlots(t *testing.T) {
	m := newRingMediatorArea(t, ServeConfig{Dir: t.TempDir()}, 16)
	const blocking = abi.SysFlagBlocking
	processing := func(slot, seq uint32) {
		m.area.Store32(abi.SlotOff(slot)+abi.SysState, abi.SlotWord(abi.SlotProcessing, seq))
	}
	processing(0, 5)
	processing(1, 6)
	processing(2, 7)
	m.area.Store32(abi.SlotOff(2)+abi.SysState, abi.SlotWord(abi.SlotReady, 8)) // the guest took slot 2 back
	res := m.calls(
		proxyproto.Request{Slot: 0, Seq: 5, Number: abi.SysNull, Flags: blocking},
		proxyproto.Request{Slot: 1, Seq: 6, Number: 0x3ff, Flags: blocking},
		proxyproto.Request{Slot: 2, Seq: 7, Number: abi.SysNull, Flags: blocking},
		proxyproto.Request{Slot: 3, Seq: 9, Number: abi.SysNull},
	)
	// Slot 0's success, answered in the receive loop, comes in a Bulk
	// record; slot 1's failure in a record of its own.
	want := map[uint32]proxyproto.Delivery{0: proxyproto.Bulk, 1: proxyproto.ByProxy, 2: proxyproto.Refused, 3: proxyproto.ByMediator}
	for slot, d := range want {
		if res[slot].Delivery != d {
			t.Errorf("slot %d: delivery %d, want %d (%+v)", slot, res[slot].Delivery, d, res[slot])
		}
	}
	check := func(slot uint32, st abi.SlotState, seq uint32, ret int64, errno abi.Errno) {
		t.Helper()
		w := m.area.Load64(abi.SlotOff(slot) + abi.SysState)
		gotSt, gotSeq := abi.SplitSlotWord(uint32(w))
		gotRet := int64(m.area.Load64(abi.SlotOff(slot) + abi.SysRet))
		if gotSt != st || gotSeq != seq || (st == abi.SlotFinished && (gotRet != ret || abi.Errno(w>>32) != errno)) {
			t.Errorf("slot %d: %v seq %d ret %d errno %d; want %v seq %d ret %d errno %d", slot, gotSt, gotSeq, gotRet, w>>32, st, seq, ret, errno)
		}
	}
	check(0, abi.SlotFinished, 5, 0, 0)
	check(1, abi.SlotFinished, 6, -1, abi.ErrnoNOSYS)
	check(2, abi.SlotReady, 8, 0, 0)
	check(3, abi.SlotFree, 0, 0, 0)
	// Context threads' results take the same path.
	processing(4, 1)
	if r := m.calls(proxyproto.Request{Slot: 4, Seq: 1, Number: abi.SysClockGet, Flags: blocking, Args: [6]uint64{unix.CLOCK_MONOTONIC, 64}}); r[4].Delivery != proxyproto.ByProxy {
		t.Fatalf("context call: %+v", r[4])
	}
	check(4, abi.SlotFinished, 1, 0, 0)
	// A batch of successes answered in the receive loop: one record.
	var batch []proxyproto.Request
	for slot := uint32(8); slot < 16; slot++ {
		processing(slot, 3)
		batch = append(batch, proxyproto.Request{Slot: slot, Seq: 3, Number: abi.SysNull, Flags: blocking})
	}
	before := m.records
	if res := m.calls(batch...); len(res) != 8 {
		t.Fatalf("%d results for 8 calls", len(res))
	}
	if n := m.records - before; n != 1 {
		t.Errorf("8 null calls in one batch took %d result records, want 1 (Bulk)", n)
	}
	for slot := uint32(8); slot < 16; slot++ {
		check(slot, abi.SlotFinished, 3, 0, 0)
	}
}
