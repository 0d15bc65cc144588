package sim

import (
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// startProgramLocked puts launch l on engine e from start, open-ended, and
// runs it in a goroutine of its own. With the virtual clock the program
// holds the timeline at start until it ends.
func (s *Sim) startProgramLocked(e Engine, l *launch, start int64) {
	en := &s.engines[e]
	en.prog = l
	en.start, en.end = start, start+maxCost // until it ends
	en.first, en.ran, en.rest = start, 0, 0
	l.stop = make(chan struct{})
	if !s.wall {
		s.holds++
	}
	v := en.ch.vm
	v.progs.Add(1)
	lim := v.maxCmd
	go func() {
		defer v.progs.Done()
		t0 := time.Now()
		if lim > 0 {
			// Its measured wall time is its time on either clock.
			watchdog := time.AfterFunc(time.Duration(backend.Deadline(lim)), func() { l.end(abi.ErrTimedOut) })
			defer watchdog.Stop()
		}
		code := l.run()
		s.programDone(e, l, code, int64(time.Since(t0)))
	}()
}

// programDone ends launch l's command on engine e: with the wall clock at
// the wall time it finished; with the virtual clock its measured wall
// duration d after its start, releasing the timeline.
func (s *Sim) programDone(e Engine, l *launch, code abi.ErrorCode, d int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	en := &s.engines[e]
	if en.prog != l {
		panic("sim: program ended on an engine running something else")
	}
	en.code = code
	if s.wall {
		s.advanceLocked(s.wallNow())
		en.end = max(s.now, en.start)
	} else {
		s.holds--
		en.end = en.start + min(max(d, 0), maxCost)
	}
	s.seq++
	s.events.push(event{t: en.end, seq: s.seq, eng: e, kind: evEngine})
	if s.wall {
		s.advanceLocked(s.wallNow())
	}
	s.notifyLocked()
	s.progEnd.Broadcast()
}

// heldLocked reports whether the virtual timeline is held: by a program
// (the next event, if any, lies beyond Now, where time cannot go until the
// program ends), by data still moving (movingLocked), or by a command
// that ended with an effect not done yet (the loss after a timeout):
// nothing happens until its completion, as if it had been at once.
func (s *Sim) heldLocked() bool {
	if !s.wall && s.parkedFx > 0 {
		return true
	}
	if len(s.events) == 0 {
		return s.holds > 0
	}
	t := s.events[0].t
	return s.holds > 0 && t > s.now || !s.wall && s.movingLocked(t)
}
