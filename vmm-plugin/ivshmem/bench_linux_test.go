package ivshmem

import (
	"testing"
)

// BenchmarkDoorbell measures one doorbell round trip: Client.Notify to the
// host peer, the server's epoll goroutine reading the eventfd and calling
// OnDoorbell, and the benchmark goroutine seeing that call.
func BenchmarkDoorbell(b *testing.B) {
	delivered := make(chan struct{}, 1)
	var coalesced uint64
	srv, _, _ := testServer(b, ServerConfig{
		Vectors: 1,
		OnDoorbell: func(_ int, count uint64) {
			coalesced += count - 1
			select {
			case delivered <- struct{}{}:
			default:
			}
		},
	})
	c := mustDial(b, srv.cfg.SocketPath, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := c.Notify(0, 0); err != nil {
			b.Fatal(err)
		}
		<-delivered
	}
	b.StopTimer()
	srv.Close() // orders the callback's writes before the read below
	if coalesced != 0 {
		b.Fatalf("%d doorbells coalesced in a strict ping-pong", coalesced)
	}
}

// BenchmarkNotify measures the client's doorbell write alone.
func BenchmarkNotify(b *testing.B) {
	srv, _, _ := testServer(b, ServerConfig{Vectors: 1, OnDoorbell: func(int, uint64) {}})
	c := mustDial(b, srv.cfg.SocketPath, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Notify(0, 0); err != nil {
			b.Fatal(err)
		}
	}
}
