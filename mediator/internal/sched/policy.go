package sched

// decide computes the holds for the coming phase under the policy in force
// and records them on the VMs. advanced says whether the period had a length
// (time-based state such as the timeslice turn moves only then).
func (s *Scheduler) decide(thr int64, advanced bool) map[uint32]Reason {
	var held map[uint32]Reason
	switch s.policy {
	case PolicyDFQ:
		held = s.decideDFQ(thr)
	case PolicyCap:
		held = s.decideCap()
	case PolicyTimeslice:
		held = s.decideTimeslice(advanced)
	}
	for id, vm := range s.vms {
		r, ok := held[id]
		vm.held, vm.reason = ok, r
	}
	return held
}

func (s *Scheduler) decideDFQ(thr int64) map[uint32]Reason {
	held := map[uint32]Reason{}
	runner := false // an active VM that keeps running
	for id, vm := range s.vms {
		if vm.lag > thr {
			held[id] = ReasonAhead
		} else if vm.active {
			runner = true
		}
	}
	if !runner {
		// Nobody active, or (impossible with t_sys = min) everyone active
		// ahead: holding would only idle the GPU.
		return nil
	}
	return held
}

func (s *Scheduler) decideCap() map[uint32]Reason {
	held := map[uint32]Reason{}
	for id, vm := range s.vms {
		if vm.cap > 0 && vm.capBalance < 0 {
			held[id] = ReasonCap
		}
	}
	return held
}

func (s *Scheduler) decideTimeslice(advanced bool) map[uint32]Reason {
	if advanced {
		s.passTurn()
	}
	if !s.hasTurn {
		ids := s.sortedIDs()
		if len(ids) == 0 {
			return nil
		}
		s.turn, s.hasTurn, s.turnUsed = ids[0], true, 0
	}
	held := map[uint32]Reason{}
	for id := range s.vms {
		if id != s.turn {
			held[id] = ReasonTurn
		}
	}
	return held
}

// passTurn grants the coming period: to the current VM while it has work and
// periods left of its weight, else to the next active VM in id order.
func (s *Scheduler) passTurn() {
	if cur, ok := s.vms[s.turn]; s.hasTurn && ok && cur.active && s.turnUsed < cur.weight {
		s.turnUsed++
		return
	}
	ids := s.sortedIDs()
	start := 0
	if s.hasTurn {
		for start < len(ids) && ids[start] <= s.turn {
			start++
		}
	}
	for i := range ids {
		id := ids[(start+i)%len(ids)]
		if s.vms[id].active {
			s.turn, s.hasTurn, s.turnUsed = id, true, 1
			return
		}
	}
	// Nobody active: the turn stays, unused.
	if _, ok := s.vms[s.turn]; s.hasTurn && ok {
		s.turnUsed = 0
	}
}

// decision builds the Decision from the holds just made.
func (s *Scheduler) decision(held map[uint32]Reason, thr int64, saturated bool) Decision {
	d := Decision{
		Hold:      make([]uint32, 0, len(held)),
		Policy:    s.policy,
		TSys:      s.tsys,
		Threshold: thr,
		Saturated: saturated,
		VMs:       s.states(),
	}
	for _, st := range d.VMs {
		if st.Held {
			d.Hold = append(d.Hold, st.ID)
		}
	}
	return d
}
