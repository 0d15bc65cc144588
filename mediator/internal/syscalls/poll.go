package syscalls

import (
	"runtime"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// poll is the VM's poller goroutine: scan, batch, send; adaptive between
// spinning and idle scans.
func (f *Forwarder) poll() {
	defer f.wg.Done()
	var (
		batch      = make([]proxyproto.Request, 0, proxyproto.MaxBatch)
		msg        = make([]byte, 0, proxyproto.MaxMessage)
		next       uint32 // where the next scan starts (round robin over slots)
		lastActive = time.Now()
		idle       = time.NewTimer(time.Hour)
	)
	defer idle.Stop()
	for {
		select {
		case <-f.stop:
			return
		default:
		}
		cfg := f.cfg.Load()
		p := f.current()
		if p == nil {
			// No proxy yet (or a restart's backoff): calls wait in their slots.
			if !f.sleep(idle, 10*time.Millisecond) {
				return
			}
			continue
		}
		taken := f.stats.taken.Load()
		batch = f.scan(batch[:0], cfg.Batch, &next, p)
		if len(batch) > 0 && cfg.Window > 0 {
			batch = f.coalesce(batch, cfg, &next, p)
		}
		if len(batch) > 0 {
			lastActive = time.Now()
			msg = proxyproto.AppendCalls(msg[:0], batch)
			f.stats.batches.Add(1)
			// A failed write means the proxy is gone: the supervisor fails
			// what it held (these calls included) with EIO.
			_ = p.write(msg)
			continue
		}
		// Activity: a slot taken (served here or not), a doorbell, a result
		// delivered; and calls still with the proxy, whose callers come back.
		if f.stats.activity.Swap(false) || f.stats.taken.Load() != taken || f.inFlight() > 0 {
			lastActive = time.Now()
		}
		if time.Since(lastActive) < cfg.Spin {
			runtime.Gosched()
			continue
		}
		if !f.sleep(idle, cfg.IdleScan) {
			return
		}
	}
}

// coalesce keeps scanning until the batch is full or the window since its
// first call has passed.
func (f *Forwarder) coalesce(batch []proxyproto.Request, cfg *Config, next *uint32, p *sock) []proxyproto.Request {
	deadline := time.Now().Add(cfg.Window)
	for len(batch) < cfg.Batch && time.Now().Before(deadline) {
		n := len(batch)
		batch = f.scan(batch, cfg.Batch, next, p)
		if len(batch) == n {
			runtime.Gosched()
		}
	}
	return batch
}

// sleep waits for a kick, the stop or d; false means stop.
func (f *Forwarder) sleep(t *time.Timer, d time.Duration) bool {
	t.Reset(d)
	select {
	case <-f.stop:
		return false
	case <-f.kick:
		f.stats.activity.Store(true)
	case <-t.C:
		return true
	}
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	return true
}

// scan walks every slot once from *next, taking READY ones until batch has
// max calls. Calls the forwarder serves itself (fastcalls, revocations,
// malformed slots) are answered on the spot.
func (f *Forwarder) scan(batch []proxyproto.Request, max int, next *uint32, p *sock) []proxyproto.Request {
	n := uint32(f.spec.Slots)
	var raw [abi.SyscallSlotSize]byte
	for k := uint32(0); k < n && len(batch) < max; k++ {
		i := (*next + k) % n
		off := abi.SlotOff(i)
		if st, _ := abi.SplitSlotWord(f.spec.Area.Load32(off + abi.SysState)); st != abi.SlotReady {
			continue
		}
		f.spec.Area.CopyOut(raw[:], off)
		s, errno := abi.DecodeSlot(raw[:])
		if errno == abi.ErrnoAGAIN {
			continue // it changed under us: not (or no longer) READY
		}
		if !f.take(i, &s) {
			f.stats.raced.Add(1)
			continue
		}
		f.stats.taken.Add(1)
		f.stats.call(&s)
		if errno != 0 {
			f.answer(i, &s, -1, errno)
			continue
		}
		if req, ok := f.serveLocally(i, &s); ok {
			batch = append(batch, req)
			if !f.track(i, &s, p) {
				batch = batch[:len(batch)-1]
			}
		}
	}
	*next = (*next + 1) % n
	return batch
}

// take moves a READY slot to PROCESSING (blocking) or FREE with the next
// sequence number (non-blocking), by compare-and-swap against the state the
// copy saw: a guest that rewrote the slot in between keeps it.
func (f *Forwarder) take(i uint32, s *abi.Slot) bool {
	to := abi.SlotWord(abi.SlotProcessing, s.Seq)
	if !s.Blocking() {
		to = abi.SlotWord(abi.SlotFree, abi.NextSeq(s.Seq))
		f.stats.nonBlocking.Add(1)
	}
	return f.spec.Area.CompareAndSwap32(abi.SlotOff(i)+abi.SysState, abi.SlotWord(abi.SlotReady, s.Seq), to)
}

// answer completes a taken call the forwarder served itself.
func (f *Forwarder) answer(i uint32, s *abi.Slot, ret int64, errno abi.Errno) {
	if s.Blocking() {
		f.finish(i, s.Seq, ret, errno)
		return
	}
	f.stats.errno(errno)
}

// serveLocally answers what needs no proxy; otherwise it returns the request
// to forward.
func (f *Forwarder) serveLocally(i uint32, s *abi.Slot) (proxyproto.Request, bool) {
	switch {
	case s.Fastcall():
		ret, errno := f.runFastcall(s.Number)
		f.answer(i, s, ret, errno)
		return proxyproto.Request{}, false
	case s.Number == abi.SysFastcallRevoke:
		f.answer(i, s, 0, f.revokeFastcall(s.Args[0]))
		return proxyproto.Request{}, false
	}
	req := proxyproto.Request{Slot: i, Seq: s.Seq, Number: s.Number, Flags: s.Flags, Context: s.Context, Args: s.Args}
	if s.Number == abi.SysGetrusage {
		req.Aux = f.spec.GPUNs()
	}
	return req, true
}

// track records a blocking call handed to proxy p; if p is no longer the
// running proxy the call fails with EIO at once (false: do not send it).
func (f *Forwarder) track(i uint32, s *abi.Slot, p *sock) bool {
	f.mu.Lock()
	ok := f.sock == p && f.state == "running"
	if ok && s.Blocking() {
		if f.inflight[i] == 0 {
			f.nIn++
		}
		// A guest that forged READY over a call in flight gets one result
		// for the slot, whichever comes first.
		f.inflight[i] = s.Seq + 1
	}
	f.mu.Unlock()
	if !ok {
		f.answer(i, s, -1, abi.ErrnoIO)
	}
	return ok
}

// inFlight is the number of blocking calls with the proxy.
func (f *Forwarder) inFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nIn
}
