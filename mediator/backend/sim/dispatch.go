package sim

import (
	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// makeReadyLocked puts ch, whose head is not running, at the back of its
// head's engine's FIFO.
func (s *Sim) makeReadyLocked(ch *channel) {
	ch.inReady = true
	s.engines[EngineOf(ch.q.front().cmd.Op)].ready.push(ch)
}

// dispatchLocked starts commands on every idle engine that has a ready
// channel. A command that fails instead of starting may make its channel
// ready for the other engine, hence the repeat.
func (s *Sim) dispatchLocked() {
	for again := true; again; {
		again = false
		for e := range numEngines {
			if s.dispatchEngineLocked(e) {
				again = true
			}
		}
	}
}

// dispatchEngineLocked starts the next ready command on e if e is idle. It
// reports whether a command failed on the way.
func (s *Sim) dispatchEngineLocked(e Engine) (failed bool) {
	en := &s.engines[e]
	for en.ch == nil && en.ready.len() > 0 {
		ch := en.ready.popFront()
		if ch.dead || !ch.inReady {
			continue
		}
		ch.inReady = false
		head := ch.q.front()
		start := max(s.now, ch.lastEnd)
		if ch.resume > 0 {
			// A preempted command goes on where it stopped.
			en.ch, en.stats, en.orphan, en.code = ch, ch.vm.stats, false, ch.resumeCode
			en.ref = backend.ChannelRef{VM: ch.vm.id, Channel: ch.idx}
			ch.running = true
			s.startSliceLocked(e, en, start, ch.resumeAt, ch.resumeRan, ch.resume)
			ch.resume = 0
			continue
		}
		if code := s.execLocked(ch.vm, &head.cmd); code != abi.OK {
			s.finishHeadLocked(ch, code, 0, 0, 0)
			failed = true
			continue
		}
		en.ch, en.stats, en.orphan, en.code = ch, ch.vm.stats, false, abi.OK
		en.ref = backend.ChannelRef{VM: ch.vm.id, Channel: ch.idx}
		ch.running = true
		if l := s.starting; l != nil {
			s.starting = nil
			s.startProgramLocked(e, l, start)
			continue
		}
		cost := s.p.Cost(&head.cmd)
		if lim := ch.vm.maxCmd; lim > 0 && cost > backend.Deadline(lim) {
			// It runs until the deadline and is ended there, its data
			// never moved.
			cost, en.code, s.moving, s.data = backend.Deadline(lim), abi.ErrTimedOut, nil, false
		}
		if move := s.moving; move != nil {
			s.queueMoveLocked(en, ch, move, s.data)
		}
		s.moving, s.data = nil, false
		s.startSliceLocked(e, en, start, start, 0, cost)
	}
	return failed
}

// startSliceLocked runs a command on e from start that began at first, has
// run ran ns and has cost ns left: to its end, or for a time slice when it
// is one the engine may preempt (Params.TimesliceNs) and longer than that.
func (s *Sim) startSliceLocked(e Engine, en *engine, start, first, ran, cost int64) {
	run := cost
	if ts := s.p.TimesliceNs; ts > 0 && e == Compute && en.fx == nil && cost > ts {
		run = ts
	}
	en.start, en.end = start, start+run
	en.first, en.ran, en.rest = first, ran, cost-run
	s.seq++
	s.events.push(event{t: en.end, seq: s.seq, eng: e, kind: evEngine})
}

// sliceEndLocked ends the running slice of a command that has more to run:
// it goes on, or, when a command of another VM waits for the engine, it is
// preempted to the back of the engine's FIFO.
func (s *Sim) sliceEndLocked(e Engine, en *engine) {
	ran := en.ran + en.end - en.start
	if !s.otherWaitsLocked(en) {
		s.startSliceLocked(e, en, en.end, en.first, ran, en.rest)
		return
	}
	ch := en.ch
	ch.resume, ch.resumeAt, ch.resumeRan, ch.resumeCode = en.rest, en.first, ran, en.code
	ch.running = false
	ch.lastEnd = en.end
	en.ch, en.stats, en.code = nil, nil, abi.OK
	en.first, en.ran, en.rest = 0, 0, 0
	s.makeReadyLocked(ch)
}

// otherWaitsLocked reports whether a channel of a VM other than the running
// command's is in e's FIFO.
func (s *Sim) otherWaitsLocked(en *engine) bool {
	for i := range en.ready.len() {
		if w := en.ready.at(i); w.inReady && !w.dead && w.vm != en.ch.vm {
			return true
		}
	}
	return false
}

// finishHeadLocked completes ch's head command and readies its next one;
// gpuNs, when not 0, is its run time where that is less than end - start
// (it was preempted).
func (s *Sim) finishHeadLocked(ch *channel, code abi.ErrorCode, start, end, gpuNs int64) {
	q := ch.q.popFront()
	s.pending = append(s.pending, delivery{vm: ch.vm, c: backend.Completion{
		Channel: ch.idx, Tag: q.tag, Op: q.cmd.Op, Code: code, Start: start, End: end, GPUNs: gpuNs,
	}})
	switch {
	case ch.dead:
		s.flushLocked(ch)
	case ch.q.len() == 0:
		s.deactivateLocked(ch)
	default:
		s.makeReadyLocked(ch)
	}
}

// engineDoneLocked ends the command running on e.
func (s *Sim) engineDoneLocked(e Engine) {
	en := &s.engines[e]
	if fx := en.fx; s.wall && fx != nil && !fx.done && !en.orphan {
		// The host has not moved the command's data yet: it runs on, its
		// engine busy and its end open as a program's, until it has
		// (movedLocked ends it, at its modelled End at the earliest).
		fx.holding, fx.engine, fx.end = true, e, en.end
		en.end = en.start + maxCost
		return
	}
	busy := en.end - en.start
	en.busy += busy
	en.stats.busy += busy
	if en.rest > 0 && !en.orphan {
		s.sliceEndLocked(e, en)
		return
	}
	ch, orphan, code, fx := en.ch, en.orphan, en.code, en.fx
	first, ran := en.first, en.ran+busy
	en.ch, en.stats, en.orphan, en.prog, en.code, en.fx = nil, nil, false, nil, abi.OK, nil
	en.first, en.ran, en.rest = 0, 0, 0
	if orphan {
		return
	}
	if code == abi.ErrTimedOut {
		if reset := s.timedOutLocked(ch); reset != nil {
			fx = reset // it moved no data
		}
	}
	ch.running = false
	if fx != nil && !fx.done {
		// The loss after a timeout (a movement's command ran on above;
		// the virtual timeline waits for a movement): the engine is free
		// on time, the completion waits for the effect.
		fx.parked, fx.code, fx.start, fx.end = true, code, en.start, en.end
		ch.parked = fx
		s.parkedFx++ // the virtual timeline waits for it
		return
	}
	ch.lastEnd = en.end
	var gpuNs int64
	if ran < en.end-first {
		gpuNs = ran // preempted on the way
	}
	s.finishHeadLocked(ch, code, first, en.end, gpuNs)
}

// stepLocked processes the next event, then lets the dispatcher react.
func (s *Sim) stepLocked() {
	ev := s.events.pop()
	s.setNowLocked(ev.t)
	s.nEvents++
	switch ev.kind {
	case evEngine:
		s.engineDoneLocked(ev.eng)
	case evTimer:
		if !s.closed { // After functions do not outlive Close
			s.pending = append(s.pending, delivery{fn: ev.fn})
		}
	}
	s.dispatchLocked()
}

// advanceLocked processes every event due at or before t and moves the
// timeline to t.
func (s *Sim) advanceLocked(t int64) {
	for len(s.events) > 0 && s.events[0].t <= t {
		s.stepLocked()
	}
	s.setNowLocked(t)
}
