package proxy

import (
	"net"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// sink takes results from the receive loop and the context threads: into
// the result ring once the mediator sent one, else to the writer (Results
// datagrams). send never keeps rs.
type sink struct {
	w    *writer
	ring atomic.Pointer[ringOut]
}

func (s *sink) send(rs []proxyproto.Result) { s.sendAs(rs, false) }

// sendLocal sends the results the receive loop made before it gave their
// requests' records back (ProxyConsumed): those may go as Bulk records.
func (s *sink) sendLocal(rs []proxyproto.Result) { s.sendAs(rs, true) }

func (s *sink) sendAs(rs []proxyproto.Result, local bool) {
	if o := s.ring.Load(); o != nil {
		o.send(rs, local)
		return
	}
	s.w.send(append([]proxyproto.Result(nil), rs...))
}

// ringOut writes results straight into the result ring from whichever
// thread made them (no hand-off), and kicks the mediator when it said it
// sleeps. With the VM's syscall area (area not nil) a blocking call's result
// goes into its slot first (proxyproto.CompleteSlot), so that the GPU
// thread waiting there is answered without the mediator; the record then
// only tells the mediator the call is over.
type ringOut struct {
	rg   *proxyproto.Ring
	area *shm.Region   // the VM's syscall area, or nil
	tail atomic.Uint64 // the producers' reservation counter
	fd   int           // the mediator socket (the same number in every thread's table)
	stop <-chan struct{}
}

var kickMsg = []byte{proxyproto.MsgKick}

func (o *ringOut) send(rs []proxyproto.Result, local bool) {
	if o.area != nil {
		for i := range rs {
			if j := i + slotAhead; j < len(rs) {
				// Each completion loads its slot's state word first, a
				// line the GPU wrote last: ask for it (to write) while the
				// ones before it are completed, not when its load stalls.
				o.area.PrefetchW(abi.SlotOff(rs[j].Slot))
			}
			o.complete(&rs[i])
		}
	}
	var bulk proxyproto.Result // open while Mask != 0
	for _, r := range rs {
		if local && r.Delivery == proxyproto.ByProxy && r.Errno == 0 {
			// One record for up to 64 successes of the batch (the
			// mediator knows which call each position held).
			if bulk.Mask != 0 && r.Pos-bulk.Pos < 64 {
				bulk.Mask |= 1 << (r.Pos - bulk.Pos)
				continue
			}
			if bulk.Mask != 0 {
				o.put(bulk)
			}
			bulk = proxyproto.Result{Delivery: proxyproto.Bulk, Pos: r.Pos, Mask: 1}
			continue
		}
		o.put(r)
	}
	if bulk.Mask != 0 {
		o.put(bulk)
	}
	o.kick()
}

// put writes one record, waiting while the ring is full.
func (o *ringOut) put(r proxyproto.Result) {
	for spins := 0; !o.rg.ProxyTryPut(&o.tail, r); spins++ {
		// Full: the mediator is behind. Make sure it looks, then wait.
		o.kick()
		select {
		case <-o.stop:
			return
		default:
		}
		if spins < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// complete writes a blocking call's result into its slot, and says so in r.
// A slot past the area is the mediator's to refuse (it never sends one).
func (o *ringOut) complete(r *proxyproto.Result) {
	if r.Flags&abi.SysFlagBlocking == 0 || abi.SlotOff(r.Slot)+abi.SyscallSlotSize > uint64(o.area.Len()) {
		return
	}
	if proxyproto.CompleteCall(o.area, r.Slot, r.Seq, r.Call, r.Ret, r.Errno) {
		r.Delivery = proxyproto.ByProxy
	} else {
		r.Delivery = proxyproto.Refused
	}
}

// slotAhead is how many completions ahead of the one written send asks
// for a slot's line: ~100 ns each for a line from the GPU, ~15 ns a
// completion.
const slotAhead = 16

// kick wakes the mediator if it announced that it sleeps. The socket is
// non-blocking: a full socket already holds kicks, so a failed one is
// dropped.
func (o *ringOut) kick() {
	if o.rg.ProxyKickMediator() {
		_, _ = unix.Write(o.fd, kickMsg)
	}
}

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
