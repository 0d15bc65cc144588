package syscalls

import (
	"context"
	"log/slog"
	"runtime"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/spin"
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
		next       uint32    // where the next scan starts (round robin over slots)
		lastActive = f.now() // ns since t0
		yield      = spin.New()
		idle       = time.NewTimer(time.Hour)
		ring       *proxyproto.Ring // the rings tail counts in
		tail       uint64           // requests published into ring
		announced  bool             // ring's mediator-idle word is 1
		logged     pollerLog        // the counters at the last debug line
	)
	defer idle.Stop()
	f.stats.busySince.Store(f.now())
	for {
		select {
		case <-f.stop:
			return
		default:
		}
		cfg := f.cfg.Load()
		now := f.now() // the pass's one clock read before it ends
		// A load first: a swap is a locked instruction, and this runs
		// every pass.
		if f.orphanSweep.Load() && f.orphanSweep.Swap(false) {
			f.mu.Lock()
			f.failOrphansLocked()
			f.mu.Unlock()
		}
		f.ringMu.RLock()
		p, rg, head, delivered := f.begin(announced)
		woke := announced
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
		room := min(cfg.Batch, rg.MediatorReqFree(tail, head))
		taken := f.stats.taken.Load()
		batch = f.scan(batch[:0], room, &next, p, woke, now)
		if len(batch) > 0 && cfg.Window > 0 {
			batch = f.coalesce(batch, room, cfg, &next, p)
		}
		// Tracked before they are out: a receiver woken by a kick sent
		// before this pass may read their records as soon as they exist.
		if batch = f.track(batch, p, tail); len(batch) > 0 {
			for i := range batch {
				rg.MediatorPutRequest(tail, &batch[i])
				tail++
			}
			if rg.MediatorPublish(tail) {
				p.kick()
			}
			// The counts after the calls are out, not on their path.
			f.stats.batches.Add(1)
			f.endPass(now)
			f.ringMu.RUnlock()
			lastActive = now
			continue
		}
		f.endPass(now)
		// Activity: a slot taken (served here or not), a doorbell, a result
		// delivered (its caller comes back).
		if f.stats.activity.Load() && f.stats.activity.Swap(false) || f.stats.taken.Load() != taken || delivered > 0 {
			lastActive = now
		}
		if now-lastActive < int64(cfg.Spin) {
			f.ringMu.RUnlock()
			yield.Idle()
			continue
		}
		// Going idle: announce it, then look at the results once more (a
		// result published before the proxy could see the announcement
		// would wait for no kick).
		rg.MediatorIdle(true)
		late := f.drain()
		f.ringMu.RUnlock()
		if late > 0 {
			announced = true // begin clears it
			lastActive = f.now()
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
// there is none), the proxy's request head, and the results consumed from
// the rings. The head is read before the drain: every Bulk record of the
// requests before it is then consumed, so the positions before it can be
// reused (their shadow entries written again). clear says that the poller
// had announced itself idle. The caller holds ringMu (read).
func (f *Forwarder) begin(clear bool) (*sock, *proxyproto.Ring, uint64, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != "running" || f.ring == nil {
		return nil, nil, 0, 0
	}
	if clear {
		f.ring.MediatorIdle(false)
	}
	head := f.ring.MediatorReqHead()
	return f.sock, f.ring, head, f.drainLocked()
}

// coalesce keeps scanning until the batch is full or the window since its
// first call has passed.
func (f *Forwarder) coalesce(batch []proxyproto.Request, max int, cfg *Config, next *uint32, p *sock) []proxyproto.Request {
	deadline := time.Now().Add(cfg.Window)
	for len(batch) < max && time.Now().Before(deadline) {
		n := len(batch)
		batch = f.scan(batch, max, next, p, false, f.now())
		if len(batch) == n {
			runtime.Gosched()
		}
	}
	return batch
}

// sleep waits for a kick, the stop or d; false means stop. The time
// between sleeps is the poller's busy time (Stats.PollerBusy).
func (f *Forwarder) sleep(t *time.Timer, d time.Duration) bool {
	if since := f.stats.busySince.Swap(0); since != 0 {
		f.stats.busyNs.Add(f.now() - since)
	}
	defer f.stats.busySince.Store(f.now())
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

// scan takes calls until batch has max: from the request ring (sysring.go),
// from the ready map's hints (readymap.go), and from a sweep of every state word that starts
// every sweepNs and reads sweepChunk slots per pass; a pass after a wakeup
// from idle (whole), or any pass without the ready map, sweeps every slot.
// Calls the forwarder serves itself (fastcalls, revocations, malformed
// slots) are answered on the spot; the batch is not tracked yet (track).
// start is the pass's start (ns since t0).
func (f *Forwarder) scan(batch []proxyproto.Request, max int, next *uint32, p *sock, whole bool, start int64) []proxyproto.Request {
	f.passAt = start
	batch = f.scanRing(batch, max, p)
	if f.readyMap {
		batch = f.scanHints(batch, max, next, p)
	}
	if f.sweepAt < 0 && (!f.readyMap || whole || start-f.lastSweep >= sweepNs) {
		f.sweepAt, f.lastSweep = 0, start
		f.stats.fullScans.Add(1)
	}
	if f.sweepAt >= 0 {
		chunk := uint32(sweepChunk)
		if whole || !f.readyMap {
			chunk = uint32(f.spec.Slots)
		}
		batch = f.sweep(batch, max, chunk, p)
	}
	return batch
}

// endPass counts a pass that started at start (ns since t0) and flushes
// what it tallied: after its calls are out, not on their path.
func (f *Forwarder) endPass(start int64) {
	f.flushTally()
	f.stats.passes.Add(1)
	f.stats.passNs.Add(f.now() - start)
}

// sweep reads up to chunk state words of the sweep in progress and takes
// the READY slots among them.
func (f *Forwarder) sweep(batch []proxyproto.Request, max int, chunk uint32, p *sock) []proxyproto.Request {
	n := uint32(f.spec.Slots)
	i := uint32(f.sweepAt)
	for end := min(n, i+chunk); i < end && len(batch) < max; i++ {
		if i%256 == 255 {
			// A long sweep: results that came meanwhile go back now, not
			// at the next pass.
			f.drain()
		}
		if st, _ := abi.SplitSlotWord(f.spec.Area.Load32(abi.SlotOff(i) + abi.SysState)); st == abi.SlotReady {
			batch = f.serveSlot(batch, i, p)
		}
	}
	f.sweepAt = int(i)
	if i >= n {
		f.sweepAt = -1
	}
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
	if !f.take(i, &s) {
		f.stats.raced.Add(1)
		return batch
	}
	f.tally.count(&s)
	return f.dispatch(batch, i, &s, errno)
}

// dispatch serves a call taken from slot i (or read from the request ring
// for it) whose decoding gave errno: refused or answered here, or appended
// to batch for the proxy.
func (f *Forwarder) dispatch(batch []proxyproto.Request, i uint32, s *abi.Slot, errno abi.Errno) []proxyproto.Request {
	if errno != 0 {
		f.answer(i, s, -1, errno)
		return batch
	}
	if f.serveLocally(i, s) {
		return batch
	}
	// The request is written in place (the poller's batch has room: its
	// capacity is the largest batch), not built and copied in.
	n := len(batch)
	if n < cap(batch) {
		batch = batch[:n+1]
	} else {
		batch = append(batch, proxyproto.Request{})
	}
	r := &batch[n]
	r.Slot, r.Seq, r.Number, r.Flags, r.Context, r.Aux = i, s.Seq, s.Number, s.Flags, s.Context, 0
	abi.CopyArgs(&r.Args, &s.Args)
	if s.Number == abi.SysGetrusage {
		r.Aux = f.spec.GPUNs()
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
		f.finish(i, s.Seq, ret, errno, f.passAt, f.passAt)
		return
	}
	f.stats.errno(errno)
}

// serveLocally answers what needs no proxy and reports whether it did; the
// rest goes to the proxy.
func (f *Forwarder) serveLocally(i uint32, s *abi.Slot) bool {
	switch {
	case s.Fastcall():
		ret, errno := f.runFastcall(s.Number)
		f.answer(i, s, ret, errno)
	case s.Number == abi.SysFastcallRevoke:
		f.answer(i, s, 0, f.revokeFastcall(s.Args[0]))
	case f.nullHere && s.Number == abi.SysNull:
		f.answer(i, s, 0, 0)
	default:
		return false
	}
	return true
}

// track records the blocking calls of batch as handed to proxy p, under
// one lock, and which call each request position from tail holds (the
// shadow Bulk records are read against); if p is no longer the running
// proxy they fail with EIO at once and track returns an empty batch
// (nothing to send).
func (f *Forwarder) track(batch []proxyproto.Request, p *sock, tail uint64) []proxyproto.Request {
	f.mu.Lock()
	ok := f.sock == p && f.state == "running"
	if ok {
		for k := range batch {
			r := &batch[k]
			if r.Flags&abi.SysFlagBlocking == 0 {
				continue
			}
			f.nIn += f.inflight[r.Slot].hand(r.Seq, f.passAt)
			pos := tail + uint64(k)
			f.shadow[pos&f.shadowMask] = shadowEntry{pos1: pos + 1, slot: r.Slot, seq: r.Seq}
		}
	}
	f.mu.Unlock()
	if ok {
		return batch
	}
	for k := range batch {
		r := &batch[k]
		if r.Flags&abi.SysFlagBlocking != 0 {
			f.finish(r.Slot, r.Seq, -1, abi.ErrnoIO, f.passAt, f.passAt)
		} else {
			f.stats.errno(abi.ErrnoIO)
		}
	}
	return batch[:0]
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
