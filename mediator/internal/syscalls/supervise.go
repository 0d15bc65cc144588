package syscalls

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
	"golang.org/x/sys/unix"
)

// supervise keeps a proxy running: start it, receive its results until it
// dies, fail what it held with EIO, and start another after a backoff that
// doubles while proxies die young.
func (f *Forwarder) supervise() {
	defer f.wg.Done()
	delay := f.cfg.Load().RestartDelay
	for {
		started := time.Now()
		err := f.runProxy()
		if f.stopped() {
			return
		}
		f.stats.restarts.Add(1)
		f.log.Warn("syscall proxy ended; its calls failed with EIO", "err", err, "restart_in", delay)
		f.setState(fmt.Sprintf("down: %v", err))
		if time.Since(started) > 10*delay {
			delay = f.cfg.Load().RestartDelay
		}
		select {
		case <-f.stop:
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, MaxRestartDelay)
	}
}

func (f *Forwarder) stopped() bool {
	select {
	case <-f.stop:
		return true
	default:
		return false
	}
}

func (f *Forwarder) setState(s string) {
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
}

// runProxy starts one proxy and serves its results until it ends.
func (f *Forwarder) runProxy() error {
	p, err := f.spec.Start()
	if err != nil {
		return fmt.Errorf("starting the proxy: %w", err)
	}
	s, err := newSock(p.Conn())
	if err != nil {
		return errors.Join(err, p.Close())
	}
	defer s.close()
	if err := handshake(s); err != nil {
		return errors.Join(err, p.Close())
	}
	rg, mem, err := f.sendRing(s)
	if err != nil {
		return errors.Join(err, p.Close())
	}
	defer func() {
		// The poller may be writing requests: unmap once it is done.
		f.ringMu.Lock()
		_ = shm.Unmap(mem)
		f.ringMu.Unlock()
	}()
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return p.Close()
	}
	f.proxy, f.sock, f.ring, f.resHead, f.state = p, s, rg, 0, "running"
	f.shadow, f.shadowMask = make([]shadowEntry, rg.Layout().ReqCap), uint64(rg.Layout().ReqCap)-1
	f.mu.Unlock()
	f.log.Info("syscall proxy running", "pid", p.Pid())
	f.Kick()
	err = f.receive(s)
	f.mu.Lock()
	f.drainLocked() // what it answered before it died is not failed again
	f.proxy, f.sock, f.ring = nil, nil, nil
	f.state = "down"
	f.failInflightLocked()
	f.orphanSweep.Store(true) // the poller's, between two passes
	f.mu.Unlock()
	s.shutdown()
	return errors.Join(err, p.Close())
}

// ringLayout sizes a proxy's rings for slots: room for every slot's call
// (at least one batch), results twice that.
func ringLayout(slots int) proxyproto.RingLayout {
	c := uint32(256)
	for int(c) < slots && c < proxyproto.MaxRingCap/2 {
		c *= 2
	}
	return proxyproto.RingLayout{ReqCap: c, ResCap: 2 * c}
}

// sendRing creates the rings of a proxy just started (a sealed memfd: the
// proxy can neither shrink nor grow it, so our mapping never faults), maps
// them and hands the proxy the memfd.
func (f *Forwarder) sendRing(s *sock) (*proxyproto.Ring, []byte, error) {
	l := ringLayout(f.spec.Slots)
	fd, err := shm.NewMemfd("sluice-rings-"+f.spec.Name, int64(l.Size()))
	if err != nil {
		return nil, nil, fmt.Errorf("creating the proxy's rings: %w", err)
	}
	defer unix.Close(fd)
	mem, err := shm.Map(fd, l.Size())
	if err != nil {
		return nil, nil, fmt.Errorf("mapping the proxy's rings: %w", err)
	}
	rg, err := proxyproto.InitRing(mem, l)
	if err == nil {
		var a proxyproto.AreaSpec
		areaFD := -1
		if m := f.spec.Memfd; m != nil {
			a, areaFD = proxyproto.AreaSpec{Slots: uint32(f.spec.Slots), Off: m.Off}, m.FD
		}
		err = s.sendRing(l, fd, a, areaFD)
	}
	if err != nil {
		_ = shm.Unmap(mem)
		return nil, nil, fmt.Errorf("handing the proxy its rings: %w", err)
	}
	return rg, mem, nil
}

func handshake(s *sock) error {
	buf := make([]byte, 4096)
	n, err := s.recvTimeout(buf, 10*time.Second)
	if err != nil {
		return fmt.Errorf("waiting for the proxy to be ready: %w", err)
	}
	msg := buf[:n]
	if proxyproto.Type(msg) == proxyproto.MsgFatal {
		return fmt.Errorf("proxy failed to start: %s", proxyproto.DecodeFatal(msg))
	}
	v, _, err := proxyproto.DecodeReady(msg)
	if err != nil {
		return err
	}
	if v != proxyproto.Version {
		return fmt.Errorf("proxy speaks protocol %d, this mediator %d", v, proxyproto.Version)
	}
	return nil
}

// failOrphansLocked fails with EIO every blocking call left PROCESSING in
// the area whose slot has no call in flight with a proxy: a proxy that
// claimed a result it never wrote (a record saying ByProxy for a slot it
// left PROCESSING) ended the forwarder's tracking of the call, and nobody
// would ever answer it. Checking each record's slot would cost the drain a
// cache miss per call; instead the forwarder sweeps once the proxy is gone
// (a restart, after the poller's next drain; Close, after the poller has
// stopped), when only such calls can be PROCESSING and untracked. The
// caller holds mu, and the poller is not in a pass (it serves fastcalls
// in PROCESSING).
func (f *Forwarder) failOrphansLocked() {
	for i := range f.inflight {
		st, seq := abi.SplitSlotWord(f.spec.Area.Load32(abi.SlotOff(uint32(i)) + abi.SysState))
		if st != abi.SlotProcessing {
			continue
		}
		if h := f.inflight[i]; h.seq == seq+1 || h.prev == seq+1 {
			continue
		}
		if proxyproto.CompleteSlot(f.spec.Area, uint32(i), seq, -1, abi.ErrnoIO) {
			f.stats.errno(abi.ErrnoIO)
		}
	}
}

// failInflightLocked fails every call the dead proxy held with EIO.
func (f *Forwarder) failInflightLocked() {
	now := f.now()
	for i, h := range f.inflight {
		// A previous call's slot has moved on: the proxy answered it
		// there, only its record did not come. Nothing to fail.
		f.inflight[i] = held{}
		if h.seq != 0 {
			f.finish(uint32(i), h.seq-1, -1, abi.ErrnoIO, h.seen, now)
		}
	}
	f.nIn = 0
}

// receive reads the proxy's messages until its socket fails.
func (f *Forwarder) receive(s *sock) error {
	defer lockThread()()
	buf := make([]byte, proxyproto.MaxMessage)
	oob := make([]byte, unix.CmsgSpace(4))
	var res []proxyproto.Result
	for {
		n, oobn, err := s.recv(buf, oob)
		if err != nil {
			return fmt.Errorf("reading from the proxy: %w", err)
		}
		if n == 0 {
			return errors.New("the proxy closed its socket")
		}
		msg := buf[:n]
		if oobn > 0 && proxyproto.Type(msg) != proxyproto.MsgFastcall {
			closeRights(oob[:oobn]) // descriptors nobody asked for
		}
		switch proxyproto.Type(msg) {
		case proxyproto.MsgKick:
			// The proxy published results while no thread of ours watched:
			// take them, and wake the poller (its callers come back).
			f.mu.Lock()
			f.drainLocked()
			f.mu.Unlock()
			f.Kick()
		case proxyproto.MsgResults:
			if res, err = proxyproto.DecodeResults(res[:0], msg); err != nil {
				return err
			}
			f.deliver(res)
		case proxyproto.MsgFastcall:
			if err := f.addFastcall(msg, oob[:oobn]); err != nil {
				return err
			}
		case proxyproto.MsgFatal:
			return fmt.Errorf("proxy failed: %s", proxyproto.DecodeFatal(msg))
		default:
			return fmt.Errorf("%w: type %d", proxyproto.ErrMessage, proxyproto.Type(msg))
		}
	}
}

// deliver writes results whose slot still waits for exactly that call.
func (f *Forwarder) deliver(res []proxyproto.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	for _, r := range res {
		seen, ok := f.claimLocked(r.Slot, r.Seq)
		if !ok {
			continue // a non-blocking call's result, or a stale one
		}
		f.finish(r.Slot, r.Seq, r.Ret, r.Errno, seen, now)
	}
}

// held is a slot's blocking call with the proxy: its sequence number + 1
// (0: none) and when the scan took it (ns since t0); and the slot's call
// before it, while that one's record has not come. The proxy writes a
// result into the slot before it publishes the record, so a GPU thread can
// take its result, free the slot and publish its next call before the
// forwarder has read the record: the slot then has two calls in flight.
// Forwarder.mu guards it.
type held struct {
	seq, prev   uint32
	seen, prevT int64
}

// hand records the call seq taken at seen, and returns by how much the
// calls in flight grew. A guest that forged READY over its call in flight
// (the same seq) gets one result, whichever comes first; one that forges
// twice over a call not yet answered loses the tracking of the oldest.
func (h *held) hand(seq uint32, seen int64) int {
	grew := 0
	switch h.seq {
	case seq + 1:
	case 0:
		grew = 1
	default:
		if h.prev == 0 {
			grew = 1
		}
		h.prev, h.prevT = h.seq, h.seen
	}
	h.seq, h.seen = seq+1, seen
	return grew
}

// claimLocked ends the tracking of slot's call with sequence seq, and
// returns when the scan took it.
func (f *Forwarder) claimLocked(slot, seq uint32) (int64, bool) {
	if int(slot) >= len(f.inflight) {
		return 0, false
	}
	h := &f.inflight[slot]
	var seen int64
	switch seq + 1 {
	case h.seq:
		seen, h.seq, h.seen = h.seen, 0, 0
	case h.prev:
		seen, h.prev, h.prevT = h.prevT, 0, 0
	default:
		return 0, false
	}
	f.nIn--
	return seen, true
}
