package sim

import "github.com/sluice-gpu/sluice/api/abi"

// effect is the data movement of a MEMSET or COPY that started: checked
// under Sim.mu when its command started, carried out by its VM's mover
// goroutine without Sim.mu, in the order the VM's commands started. Fields
// are guarded by Sim.mu, but move, which only the mover calls.
type effect struct {
	move func()
	data bool // a MEMSET's or COPY's (beforeMove runs before it)
	ch   *channel
	done bool // moved (or dropped: its VM closed)
	// parked: the command ended on the timeline before the loss of its
	// VM's buffers after it timed out; its completion waits here for the
	// mover.
	parked bool
	// holding: with the wall clock, the command reached its modelled End
	// (then in end) before the host had moved its data; it runs on its
	// engine until then.
	holding    bool
	engine     Engine
	code       abi.ErrorCode
	start, end int64
}

// queueMoveLocked queues the data movement of ch's head, which starts on
// en, and starts the VM's mover if it is idle.
func (s *Sim) queueMoveLocked(en *engine, ch *channel, move func(), data bool) {
	en.fx = s.queueEffectLocked(ch.vm, ch, move)
	en.fx.data = data
}

// queueEffectLocked queues an effect of v's command at ch's head and
// starts its mover if it is idle.
func (s *Sim) queueEffectLocked(v *simVM, ch *channel, move func()) *effect {
	fx := &effect{move: move, ch: ch}
	v.fx.push(fx)
	if !v.moving {
		v.moving = true
		v.movers.Add(1)
		go v.mover()
	}
	return fx
}

// mover carries out the VM's queued data movements in order, then ends.
// Sim.mu is held only between them: one VM's large MEMSETs and COPYs hold
// up only their engine (with the wall clock, until moved: engineDoneLocked)
// and, with the virtual clock, the timeline (heldLocked).
func (v *simVM) mover() {
	defer v.movers.Done()
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for v.fx.len() > 0 {
		fx := *v.fx.front()
		if !v.closed { // a closed VM's heap may be unmapped soon: drop the rest
			hook := s.beforeMove
			s.mu.Unlock()
			if hook != nil && fx.data {
				hook()
			}
			fx.move()
			v.dev.commit() // the command's records, and the pages it set
			s.mu.Lock()
		}
		v.fx.popFront()
		s.movedLocked(fx)
	}
	v.moving = false
}

// movedLocked marks fx done: a command that ran on past its modelled End
// for its data (wall clock) ends now, as a parked one completes now, and a
// held virtual timeline goes on.
func (s *Sim) movedLocked(fx *effect) {
	fx.done = true
	if s.wall {
		s.advanceLocked(s.wallNow())
	}
	if fx.holding {
		// The host could not keep up with the model: the command ran
		// until now, its engine busy, and is billed that.
		fx.holding = false
		s.engines[fx.engine].end = max(s.now, fx.end)
		s.engineDoneLocked(fx.engine)
		s.dispatchLocked()
	}
	if fx.parked {
		s.finishParkedLocked(fx)
		s.dispatchLocked()
	}
	s.notifyLocked()
	s.progEnd.Broadcast()
}

// finishParkedLocked completes the parked command of fx's channel.
func (s *Sim) finishParkedLocked(fx *effect) {
	ch := fx.ch
	s.parkedFx--
	fx.parked = false
	ch.parked = nil
	ch.lastEnd = fx.end
	s.finishHeadLocked(ch, fx.code, fx.start, fx.end, 0)
}

// movingLocked reports whether the virtual timeline must wait before its
// next event (at t) for data still moving: a command's end, and what comes
// at or after it, waits for the command's data, so that the command's
// completion and its channel's next command see it, and the timeline stays
// what the model says whatever the host's speed.
func (s *Sim) movingLocked(t int64) bool {
	for e := range numEngines {
		if en := &s.engines[e]; en.fx != nil && !en.fx.done && t >= en.end {
			return true
		}
	}
	return false
}
