package sched

import (
	"math/bits"
)

// EndPeriod takes the measurements of the period just ended and decides who
// is held for the coming non-poll phase.
func (s *Scheduler) EndPeriod(p Period) Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	thr := s.threshold(p)
	elapsed := span(p.Start, p.End)
	saturated := false
	if elapsed > 0 {
		busy := s.collect(p.Charges)
		saturated = s.advance(busy, elapsed)
		s.chargeCaps(busy, elapsed)
	}
	s.applyPending(thr)
	held := s.decide(thr, elapsed > 0)
	return s.decision(held, thr, saturated)
}

// threshold is the dfq threshold for the coming phase.
func (s *Scheduler) threshold(p Period) int64 {
	if s.cfg.Threshold > 0 {
		return s.cfg.Threshold
	}
	if p.PollNs >= 0 && p.NonPollNs >= 0 {
		if t := min(p.PollNs, maxLag) + min(p.NonPollNs, maxLag); t > 0 {
			return max(min(t, maxLag)/DefaultThresholdDiv, 1)
		}
	}
	if t := span(p.Start, p.End); t > 0 {
		return max(t/DefaultThresholdDiv, 1)
	}
	return 0
}

// span is end − start, 0 if end is not after start, at most maxLag; exact
// even where the subtraction would overflow int64.
func span(start, end int64) int64 {
	if end <= start {
		return 0
	}
	return int64(min(uint64(end)-uint64(start), uint64(maxLag)))
}

// collect records each known VM's charge and activity for the period and
// returns the charges by id.
func (s *Scheduler) collect(charges []Charge) map[uint32]int64 {
	for _, vm := range s.vms {
		vm.busy, vm.active = 0, false
	}
	busy := make(map[uint32]int64, len(charges))
	for _, c := range charges {
		vm, ok := s.vms[c.VM]
		if !ok {
			continue // removed mid-period
		}
		b := min(max(c.BusyNs, 0), maxLag)
		vm.busy = min(vm.busy+b, maxLag)
		vm.active = vm.active || c.Active || vm.busy > 0
		busy[c.VM] = vm.busy
	}
	for id, b := range busy {
		s.vms[id].charged = satAdd(s.vms[id].charged, b)
	}
	return busy
}

// advance charges virtual time and moves t_sys; it reports whether the GPU
// was saturated.
func (s *Scheduler) advance(busy map[uint32]int64, elapsed int64) bool {
	var n, sumW uint64
	var total int64
	for _, vm := range s.vms {
		if vm.active {
			n++
			sumW += uint64(vm.weight)
		}
	}
	deltas := make(map[uint32]int64, len(busy))
	for id, b := range busy {
		vm := s.vms[id]
		total = min(total+b, maxLag)
		d := scaled(b, sumW, uint64(vm.weight)*n)
		deltas[id] = d
		vm.lag = min(vm.lag+d, maxLag)
	}
	u := float64(total) / float64(elapsed)
	switch {
	case n == 0:
		// Idle: the next periods start the load afresh (LoadSmoothing).
		s.load, s.fresh = u, FreshPeriods
	case s.fresh > 0:
		s.load = u
		s.fresh--
		if u >= s.cfg.Saturation {
			s.fresh = 0
		}
	default:
		s.load += LoadSmoothing * (u - s.load)
	}
	saturated := u >= s.cfg.Saturation && s.load >= s.cfg.Saturation
	adv := s.tsysAdvance(saturated, deltas)
	for _, vm := range s.vms {
		vm.lag = clampLag(vm.lag - adv) // behind t_sys: pulled up
	}
	s.tsys = satAdd(s.tsys, adv)
	return saturated
}

// tsysAdvance is how far t_sys moves. All lags are ≥ 0 before the period,
// so the result is ≥ 0 and t_sys never goes back.
func (s *Scheduler) tsysAdvance(saturated bool, deltas map[uint32]int64) int64 {
	found := false
	var lo int64
	for _, vm := range s.vms {
		// Saturated: every active VM sets t_sys (LoGA). Not saturated: only
		// the ones held while the GPU had room; the others were satisfied.
		if !vm.active || (!saturated && !vm.held) {
			continue
		}
		if !found || vm.lag < lo {
			lo, found = vm.lag, true
		}
	}
	if found {
		return lo
	}
	var hi int64
	for id := range deltas {
		if s.vms[id].active {
			hi = max(hi, deltas[id])
		}
	}
	return hi
}

// scaled is busy × num / den without overflow, saturating at maxLag.
func scaled(busy int64, num, den uint64) int64 {
	if busy <= 0 || den == 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(busy), num)
	if hi >= den {
		return maxLag
	}
	q, _ := bits.Div64(hi, lo, den)
	return int64(min(q, uint64(maxLag)))
}

// chargeCaps updates the cap balances of capped VMs.
func (s *Scheduler) chargeCaps(busy map[uint32]int64, elapsed int64) {
	w := float64(s.cfg.CapWindow)
	for id, vm := range s.vms {
		if vm.cap == 0 {
			vm.capBalance = 0
			continue
		}
		credit := int64(vm.cap * float64(elapsed))
		depth := int64(vm.cap * (1 - vm.cap) * w * float64(elapsed))
		b := vm.capBalance + credit - busy[id]
		vm.capBalance = min(max(b, -maxLag), min(depth, maxLag))
	}
}

// applyPending makes weight, cap and policy changes take effect.
func (s *Scheduler) applyPending(thr int64) {
	for _, vm := range s.vms {
		vm.weight = vm.nextWeight
		if vm.cap != vm.nextCap {
			if vm.cap == 0 || vm.nextCap == 0 {
				vm.capBalance = 0
			}
			vm.cap = vm.nextCap
		}
	}
	if s.nextPolicy == s.policy {
		return
	}
	s.policy = s.nextPolicy
	for _, vm := range s.vms {
		switch s.policy {
		case PolicyDFQ:
			vm.lag = min(vm.lag, thr)
		case PolicyCap:
			vm.capBalance = max(vm.capBalance, 0)
		}
	}
}
