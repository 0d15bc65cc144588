package proxy

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// BenchmarkContextSwitch is the cost of serving a request in a guest
// context: the hand-off of a group to the context's locked thread, a cheap
// call there (clock_gettime, vDSO) and the result's way back to the writer's
// channel. No socket.
func BenchmarkContextSwitch(b *testing.B) {
	heap := make([]byte, 4096)
	w := newWriter(nil)
	defer close(w.stop)
	c, e := startContext(1, identity{keep: true, umask: 0o022, base: "/"}, heap, &sink{w: w}, -1, 0)
	if e != 0 {
		b.Fatal(e)
	}
	defer close(c.in)
	group := []proxyproto.Request{{Number: abi.SysClockGet, Args: [6]uint64{unix.CLOCK_MONOTONIC, 0}}}
	b.ResetTimer()
	for range b.N {
		c.in <- group
		if rs := <-w.ch; rs[0].Errno != 0 {
			b.Fatal(rs[0])
		}
	}
}

// BenchmarkServeNull is a null call's round trip through Serve over a
// socketpair: one Calls datagram in, one Results datagram out, no context.
func BenchmarkServeNull(b *testing.B) {
	benchServe(b, proxyproto.Request{Number: abi.SysNull})
}

// BenchmarkServeClock is the same round trip for a call served in the
// default context (the null round trip plus the context switch).
func BenchmarkServeClock(b *testing.B) {
	benchServe(b, proxyproto.Request{Number: abi.SysClockGet, Args: [6]uint64{unix.CLOCK_MONOTONIC, 0}})
}

func benchServe(b *testing.B, r proxyproto.Request) {
	h := newHarness(b, 4096)
	msg := proxyproto.AppendCalls(nil, []proxyproto.Request{r})
	buf := make([]byte, 64)
	b.ResetTimer()
	for range b.N {
		if _, err := h.conn.Write(msg); err != nil {
			b.Fatal(err)
		}
		n, err := h.conn.Read(buf)
		if err != nil || proxyproto.Type(buf[:n]) != proxyproto.MsgResults {
			b.Fatal(n, err)
		}
	}
}
