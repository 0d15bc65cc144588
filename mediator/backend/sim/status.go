package sim

import "github.com/sluice-gpu/sluice/mediator/backend"

// ReadStatus fills st with the timeline's state at st.Time: Running has one
// entry per busy engine, the compute engine's first; Active lists the
// channels with queued or running commands, in no particular order. It
// allocates nothing when st's slices have room. With the wall clock it first
// processes the events due, so what it reports is exact for st.Time however
// late the backend goroutine runs. A command whose VM detached stays on its
// engine, and in Running, until it ends.
func (s *Sim) ReadStatus(st *backend.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncLocked()
	st.Time = s.now
	st.Running = st.Running[:0]
	for e := range s.engines {
		if en := &s.engines[e]; en.ch != nil {
			st.Running = append(st.Running, backend.Running{ChannelRef: en.ref, Engine: e, Since: en.start})
		}
	}
	st.Active = st.Active[:0]
	for _, ch := range s.active {
		st.Active = append(st.Active, backend.ChannelRef{VM: ch.vm.id, Channel: ch.idx})
	}
}

// syncLocked brings a wall-clock timeline up to the present.
func (s *Sim) syncLocked() {
	if s.wall && !s.quit {
		s.advanceLocked(s.wallNow())
		s.notifyLocked()
	}
}

// EngineStatus is the status register of engine e alone: the channel
// running there, if any.
func (s *Sim) EngineStatus(e Engine) (ref backend.ChannelRef, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncLocked()
	if en := &s.engines[e]; en.ch != nil {
		return en.ref, true
	}
	return backend.ChannelRef{}, false
}

// VMBusy is the ground truth of how long VM id's commands have occupied
// engines up to Now, both engines summed, the running ones included up to
// Now. It counts after the VM detaches, and goes on counting if a VM with
// the same ID attaches again.
func (s *Sim) VMBusy(id uint32) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncLocked()
	st := s.stats[id]
	if st == nil {
		return 0
	}
	busy := st.busy
	for e := range s.engines {
		if en := &s.engines[e]; en.ch != nil && en.stats == st {
			busy += s.runningLocked(en)
		}
	}
	return busy
}

// EngineBusy is how long engine e has been busy up to Now.
func (s *Sim) EngineBusy(e Engine) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncLocked()
	en := &s.engines[e]
	if en.ch == nil {
		return en.busy
	}
	return en.busy + s.runningLocked(en)
}

func (s *Sim) runningLocked(en *engine) int64 {
	return min(max(s.now-en.start, 0), en.end-en.start)
}

// Stats are counters of the simulation itself.
type Stats struct {
	Now        int64  // the timeline
	Events     uint64 // events processed: command ends and After functions
	Queued     int    // events waiting
	MemoryUsed uint64 // device memory allocated
}

// Stats returns the simulation's counters.
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncLocked()
	return Stats{Now: s.now, Events: s.nEvents, Queued: len(s.events), MemoryUsed: s.memUsed}
}
