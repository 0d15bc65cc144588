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
		if code := s.execLocked(ch.vm, &head.cmd); code != abi.OK {
			s.finishHeadLocked(ch, code, 0, 0)
			failed = true
			continue
		}
		start := max(s.now, ch.lastEnd)
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
			cost, en.code, s.moving = backend.Deadline(lim), abi.ErrTimedOut, nil
		}
		if move := s.moving; move != nil {
			s.moving = nil
			s.queueMoveLocked(en, ch, move)
		}
		en.start, en.end = start, start+cost
		s.seq++
		s.events.push(event{t: en.end, seq: s.seq, eng: e, kind: evEngine})
	}
	return failed
}

// finishHeadLocked completes ch's head command and readies its next one.
func (s *Sim) finishHeadLocked(ch *channel, code abi.ErrorCode, start, end int64) {
	q := ch.q.popFront()
	s.pending = append(s.pending, delivery{vm: ch.vm, c: backend.Completion{
		Channel: ch.idx, Tag: q.tag, Op: q.cmd.Op, Code: code, Start: start, End: end,
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
	busy := en.end - en.start
	en.busy += busy
	en.stats.busy += busy
	ch, orphan, code, fx := en.ch, en.orphan, en.code, en.fx
	en.ch, en.stats, en.orphan, en.prog, en.code, en.fx = nil, nil, false, nil, abi.OK, nil
	if orphan {
		return
	}
	if code == abi.ErrTimedOut {
		s.timedOutLocked(ch.vm, ch.idx, ch.q.front().cmd.Op)
	}
	ch.running = false
	if fx != nil && !fx.done {
		// Wall clock (the virtual timeline waits for it): the engine is
		// free on time, the completion waits for the data.
		fx.parked, fx.code, fx.start, fx.end = true, code, en.start, en.end
		ch.parked = fx
		return
	}
	ch.lastEnd = en.end
	s.finishHeadLocked(ch, code, en.start, en.end)
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
