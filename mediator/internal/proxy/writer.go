package proxy

import (
	"net"

	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// writer sends results to the mediator. Context threads and the receive loop
// hand it slices of results; it writes whatever has gathered as one Results
// datagram (up to proxyproto.MaxBatch), never one datagram per result when
// several are ready.
type writer struct {
	conn *net.UnixConn
	ch   chan []proxyproto.Result
	stop chan struct{}
}

func newWriter(conn *net.UnixConn) *writer {
	return &writer{
		conn: conn,
		ch:   make(chan []proxyproto.Result, 256),
		stop: make(chan struct{}),
	}
}

// get returns an empty result slice for send. Once sent, a slice belongs
// to the writer.
func (w *writer) get() []proxyproto.Result { return make([]proxyproto.Result, 0, 8) }

// send queues results; after stop they are dropped (Serve has returned).
func (w *writer) send(rs []proxyproto.Result) {
	select {
	case w.ch <- rs:
	case <-w.stop:
	}
}

// run writes until stop is closed or a write fails.
func (w *writer) run() error {
	var batch []proxyproto.Result
	msg := make([]byte, 0, 8+proxyproto.MaxBatch*proxyproto.ResultSize)
	for {
		select {
		case rs := <-w.ch:
			batch = append(batch[:0], rs...)
		case <-w.stop:
			return nil
		}
	gather:
		for len(batch) < proxyproto.MaxBatch {
			select {
			case rs := <-w.ch:
				batch = append(batch, rs...)
			default:
				break gather
			}
		}
		for len(batch) > 0 {
			n := min(len(batch), proxyproto.MaxBatch)
			msg = proxyproto.AppendResults(msg[:0], batch[:n])
			if _, err := w.conn.Write(msg); err != nil {
				return err
			}
			batch = batch[n:]
		}
	}
}
