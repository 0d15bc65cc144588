package proxy

import (
	"context"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// socketpair returns two connected SOCK_SEQPACKET ends.
func socketpair(tb testing.TB) (*net.UnixConn, *net.UnixConn) {
	tb.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "seqpacket")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			tb.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// harness is a mediator end talking to an in-process Serve (no sandbox).
type harness struct {
	tb   testing.TB
	conn *net.UnixConn
	heap []byte
	dir  string
	seq  uint32
	// fastcalls received (with their descriptors) while waiting for results.
	fastcalls []receivedFastcall
}

type receivedFastcall struct {
	proxyproto.Fastcall
	fd int
}

func newHarness(tb testing.TB, heapSize int) *harness {
	tb.Helper()
	med, prox := socketpair(tb)
	h := &harness{tb: tb, conn: med, heap: make([]byte, heapSize), dir: tb.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, prox, h.heap, ServeConfig{Dir: h.dir}) }()
	tb.Cleanup(func() {
		med.Close()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			cancel()
			tb.Errorf("Serve did not end when the mediator closed its end")
		}
		cancel()
		prox.Close()
		for _, f := range h.fastcalls {
			unix.Close(f.fd)
		}
	})
	msg := h.recv()
	if _, _, err := proxyproto.DecodeReady(msg); err != nil {
		tb.Fatalf("first message: %v", err)
	}
	return h
}

func (h *harness) recv() []byte {
	h.tb.Helper()
	buf := make([]byte, proxyproto.MaxMessage)
	oob := make([]byte, unix.CmsgSpace(4))
	_ = h.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, oobn, _, _, err := h.conn.ReadMsgUnix(buf, oob)
	if err != nil {
		h.tb.Fatalf("receiving from the proxy: %v", err)
	}
	raceAcquire()
	if proxyproto.Type(buf[:n]) == proxyproto.MsgFastcall {
		f, err := proxyproto.DecodeFastcall(buf[:n])
		if err != nil {
			h.tb.Fatal(err)
		}
		scms, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(scms) != 1 {
			h.tb.Fatalf("fastcall without a descriptor: %v", err)
		}
		fds, err := unix.ParseUnixRights(&scms[0])
		if err != nil || len(fds) != 1 {
			h.tb.Fatalf("fastcall descriptors %v: %v", fds, err)
		}
		h.fastcalls = append(h.fastcalls, receivedFastcall{f, fds[0]})
	}
	return buf[:n]
}

// batch sends reqs (numbering their slots) as one Calls message and returns
// the results by request index, and how many datagrams carried them.
func (h *harness) batch(reqs []proxyproto.Request) ([]proxyproto.Result, int) {
	h.tb.Helper()
	slots := map[uint32]int{}
	for i := range reqs {
		h.seq++
		reqs[i].Slot, reqs[i].Seq = uint32(i), h.seq
		slots[uint32(i)] = i
	}
	if _, err := h.conn.Write(proxyproto.AppendCalls(nil, reqs)); err != nil {
		h.tb.Fatal(err)
	}
	out := make([]proxyproto.Result, len(reqs))
	seen := make([]bool, len(reqs))
	msgs := 0
	for left := len(reqs); left > 0; {
		msg := h.recv()
		msgs++
		var res []proxyproto.Result
		switch proxyproto.Type(msg) {
		case proxyproto.MsgFastcall:
			f := h.fastcalls[len(h.fastcalls)-1]
			res = []proxyproto.Result{{Slot: f.Slot, Seq: f.Seq, Ret: 0}}
		case proxyproto.MsgResults:
			var err error
			if res, err = proxyproto.DecodeResults(nil, msg); err != nil {
				h.tb.Fatal(err)
			}
		default:
			h.tb.Fatalf("unexpected message type %d", proxyproto.Type(msg))
		}
		for _, r := range res {
			i, ok := slots[r.Slot]
			if !ok || seen[i] || reqs[i].Seq != r.Seq {
				h.tb.Fatalf("result %+v answers no outstanding request", r)
			}
			seen[i] = true
			out[i] = r
			left--
		}
	}
	return out, msgs
}

// call makes one call in context ctx.
func (h *harness) call(ctx uint8, nr uint16, args ...uint64) (int64, abi.Errno) {
	h.tb.Helper()
	return h.callAux(ctx, nr, 0, args...)
}

func (h *harness) callAux(ctx uint8, nr uint16, aux uint64, args ...uint64) (int64, abi.Errno) {
	h.tb.Helper()
	r := proxyproto.Request{Number: nr, Context: ctx, Flags: abi.SysFlagBlocking, Aux: aux}
	copy(r.Args[:], args)
	res, _ := h.batch([]proxyproto.Request{r})
	return res[0].Ret, res[0].Errno
}

// must is call that wants success.
func (h *harness) must(ctx uint8, nr uint16, args ...uint64) int64 {
	h.tb.Helper()
	ret, e := h.call(ctx, nr, args...)
	if e != 0 {
		h.tb.Fatalf("call %s in context %d: errno %d", lookup(nr).name, ctx, e)
	}
	return ret
}

// path places s, NUL-terminated, at heap offset off and returns off.
func (h *harness) path(off uint64, s string) uint64 {
	copy(h.heap[off:], s)
	h.heap[off+uint64(len(s))] = 0
	return off
}

func errnoName(e abi.Errno) string {
	if e == 0 {
		return "success"
	}
	return unix.ErrnoName(unix.Errno(e))
}

func wantErrno(t *testing.T, what string, got, want abi.Errno) {
	t.Helper()
	if got != want {
		t.Errorf("%s: errno %d (%s), want %d (%s)", what, got, errnoName(got), want, errnoName(want))
	}
}

// raceAcquire tells the race detector what the socket already ordered: the
// proxy wrote the heap before it sent the results just received. Recvmsg
// carries no race annotation; a successful syscall.Read does (of nothing,
// here).
func raceAcquire() {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	_, _ = syscall.Read(fd, nil)
	syscall.Close(fd)
}
