package syscalls

import (
	"context"
	"log/slog"
	"runtime"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// poll is the VM's poller goroutine: scan, batch, publish into the request
// ring, consume the result ring; adaptive between spinning and idle scans.
// While it spins it is the result ring's consumer, so results need no
// thread's wakeup; before it sleeps it says so in the rings, and the proxy
// then kicks the receiver instead.
func (f *Forwarder) poll() {
	defer f.wg.Done()
	var (
		batch      = make([]proxyproto.Request, 0, proxyproto.MaxBatch)
		next       uint32 // where the next scan starts (round robin over slots)
		lastActive = time.Now()
		idle       = time.NewTimer(time.Hour)
		ring       *proxyproto.Ring // the rings tail counts in
		tail       uint64           // requests published into ring
		announced  bool             // ring's mediator-idle word is 1
		logged     pollerLog        // the counters at the last debug line
	)
	defer idle.Stop()
	for {
		select {
		case <-f.stop:
			return
		default:
		}
		cfg := f.cfg.Load()
		f.ringMu.RLock()
		p, rg, delivered := f.begin(announced)
		announced = false
		if p == nil {
			f.ringMu.RUnlock()
			// No proxy yet (or a restart's backoff): calls wait in their slots.
			if !f.sleep(idle, 10*time.Millisecond) {
				return
			}
			continue
		}
		if rg != ring {
			ring, tail = rg, 0
		}
		room := min(cfg.Batch, rg.MediatorReqFree(tail))
		taken := f.stats.taken.Load()
		batch = f.scan(batch[:0], room, &next, p)
		if len(batch) > 0 && cfg.Window > 0 {
			batch = f.coalesce(batch, room, cfg, &next, p)
		}
		if len(batch) > 0 {
			for i := range batch {
				rg.MediatorPutRequest(tail, &batch[i])
				tail++
			}
			f.stats.batches.Add(1)
			if rg.MediatorPublish(tail) {
				p.kick()
			}
			f.ringMu.RUnlock()
			lastActive = time.Now()
			continue
		}
		// Activity: a slot taken (served here or not), a doorbell, a result
		// delivered (its caller comes back).
		if f.stats.activity.Swap(false) || f.stats.taken.Load() != taken || delivered > 0 {
			lastActive = time.Now()
		}
		if time.Since(lastActive) < cfg.Spin {
			f.ringMu.RUnlock()
			runtime.Gosched()
			continue
		}
		// Going idle: announce it, then look at the results once more (a
		// result published before the proxy could see the announcement
		// would wait for no kick).
		rg.MediatorIdle(true)
		f.mu.Lock()
		late := f.drainLocked()
		f.mu.Unlock()
		f.ringMu.RUnlock()
		if late > 0 {
			announced = true // begin clears it
			lastActive = time.Now()
			continue
		}
		announced = true
		f.logPoller(&logged)
		if !f.sleep(idle, cfg.IdleScan) {
			return
		}
	}
}

// begin starts a pass: the running proxy's socket and rings (nil while
// there is none) and the results consumed from the rings. clear says that
// the poller had announced itself idle. The caller holds ringMu (read).
func (f *Forwarder) begin(clear bool) (*sock, *proxyproto.Ring, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != "running" || f.ring == nil {
		return nil, nil, 0
	}
	if clear {
		f.ring.MediatorIdle(false)
	}
	return f.sock, f.ring, f.drainLocked()
}

// coalesce keeps scanning until the batch is full or the window since its
// first call has passed.
func (f *Forwarder) coalesce(batch []proxyproto.Request, max int, cfg *Config, next *uint32, p *sock) []proxyproto.Request {
	deadline := time.Now().Add(cfg.Window)
	for len(batch) < max && time.Now().Before(deadline) {
		n := len(batch)
		batch = f.scan(batch, max, next, p)
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

// scan takes READY slots until batch has max calls: from the ready map's
// hints (readymap.go), or, every fullScanPasses passes or fullScanNs (and
// always without the ready map), by walking every slot's state word once
// from *next. Calls the forwarder serves itself (fastcalls, revocations,
// malformed slots) are answered on the spot.
func (f *Forwarder) scan(batch []proxyproto.Request, max int, next *uint32, p *sock) []proxyproto.Request {
	n := uint32(f.spec.Slots)
	start := f.now()
	defer func() {
		f.stats.passes.Add(1)
		f.stats.passNs.Add(f.now() - start)
	}()
	if f.readyMap && f.sinceFull < fullScanPasses && start-f.lastFull < fullScanNs {
		f.sinceFull++
		return f.scanHints(batch, max, next, p)
	}
	f.sinceFull, f.lastFull = 0, start
	f.stats.fullScans.Add(1)
	for k := uint32(0); k < n && len(batch) < max; k++ {
		if k%256 == 255 {
			// A long scan: results that came meanwhile go back now, not
			// at the next pass.
			f.mu.Lock()
			f.drainLocked()
			f.mu.Unlock()
		}
		i := (*next + k) % n
		if st, _ := abi.SplitSlotWord(f.spec.Area.Load32(abi.SlotOff(i) + abi.SysState)); st != abi.SlotReady {
			continue
		}
		batch = f.serveSlot(batch, i, p)
	}
	*next = (*next + 1) % n
	return batch
}

// serveSlot copies slot i out and, if it is a valid READY call, takes it:
// answered here, or appended to batch for the proxy.
func (f *Forwarder) serveSlot(batch []proxyproto.Request, i uint32, p *sock) []proxyproto.Request {
	var raw [abi.SyscallSlotSize]byte
	f.spec.Area.CopyOut(raw[:], abi.SlotOff(i))
	s, errno := abi.DecodeSlot(raw[:])
	if errno == abi.ErrnoAGAIN {
		return batch // it changed under us: not (or no longer) READY
	}
	if s.Blocking() {
		f.seenAt[i].Store(f.now())
	}
	if !f.take(i, &s) {
		f.seenAt[i].Store(0)
		f.stats.raced.Add(1)
		return batch
	}
	f.stats.taken.Add(1)
	f.stats.call(&s)
	if errno != 0 {
		f.answer(i, &s, -1, errno)
		return batch
	}
	if req, ok := f.serveLocally(i, &s); ok {
		batch = append(batch, req)
		if !f.track(i, &s, p) {
			batch = batch[:len(batch)-1]
		}
	}
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

// pollerLog holds the poller's counters as last logged.
type pollerLog struct {
	passes, served uint64
	passNs, svcNs  int64
}

// logPoller writes a debug line with the poller's scan passes and the
// host's service time (READY seen to FINISHED written) since the last line,
// when there were any: the host's share of a round trip, as sluiced
// --log-level debug shows it.
func (f *Forwarder) logPoller(l *pollerLog) {
	passes, served := f.stats.passes.Load(), f.stats.served.Load()
	if passes == l.passes || !f.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	passNs, svcNs := f.stats.passNs.Load(), f.stats.serviceNs.Load()
	dp, ds := passes-l.passes, served-l.served
	args := []any{"passes", dp, "pass_mean_ns", (passNs - l.passNs) / int64(dp), "served", ds,
		"full_scans", f.stats.fullScans.Load(), "ready_hints", f.stats.hinted.Load()}
	if ds > 0 {
		args = append(args, "service_mean_ns", (svcNs-l.svcNs)/int64(ds), "service_max_ns", f.stats.serviceMax.Load())
	}
	f.log.Debug("syscall poller going idle", args...)
	*l = pollerLog{passes: passes, served: served, passNs: passNs, svcNs: svcNs}
}
