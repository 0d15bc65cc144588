package sched

import "time"

// Turn arbitration (mediator/internal/gate, arbitration turns) lets one VM
// at a time have work on the GPU; the scheduler decides whose turn is next.
// It is start-time fair queuing over turns: each VM has a turn lag, its
// GPU time in turns over its weight (ChargeTurn: the gate charges the busy
// time the backend reported for the VM's commands, which is the turn's
// whole GPU time since no other VM had work on the GPU, with its work in
// flight charged ahead at a quantum's end, and the idle turn the VM kept
// between its commands while others waited: the gate's anticipation),
// relative to the VM given the
// last turn. NextTurn gives the turn to the waiting VM with the least lag
// (ties: the next one in id order after the last holder) and re-bases every
// lag on it; a VM behind it (idle, or waiting less long) keeps being
// behind by at most TurnBank, so it banks a bounded credit for the time it
// did not ask for. With every VM
// saturating, a VM of weight w gets w/Σw of the turns' time to within one
// turn. The policy's holds for a limit or a turn of its own (cap,
// timeslice) stay what they are: the gate gives no turn to a VM they hold.
// dfq's holds of a VM running ahead bind under the driver's arbitration
// only: under turns the turn lags share the GPU, and the two accounts would
// make a VM pay twice for one lead (gate.Gate.ApplyAhead).

// turnScale is the turn lag of one ns of GPU time at weight 1.
const turnScale = 1 << 10

// TurnBank is the most GPU time (at weight 1) a VM that waited for nothing
// (idle, or between bursts) is owed when it comes back: its turn lag falls
// at most this far below the holder's. A VM that computes half the time
// beside two that always do is then owed what the others ran while it
// slept, up to this, and gets its third of the GPU (min of what it uses
// alone and its fair share) instead of a third of its active half; a VM
// back from a long idle spell runs ahead of the others for at most this,
// times its weight (a lag is GPU time over weight: a VM of weight 8 banks
// 400 ms of GPU time, and under turns nothing else holds it back).
const TurnBank = 50 * time.Millisecond

const turnBank = int64(TurnBank) * turnScale

// ChargeTurn charges a VM busyNs of GPU time used in its turn. A negative
// busyNs takes back time charged before: the gate charges work in flight
// ahead by its estimate and nets the estimate against the busy time the
// backend reports, so that a turn's charges add up to its busy time. The
// lag falls no lower than its floor (TurnBank below the holder's). Unknown
// ids are ignored.
func (s *Scheduler) ChargeTurn(id uint32, busyNs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, ok := s.vms[id]
	if !ok {
		return
	}
	switch {
	case busyNs > 0:
		vm.turnLag = min(vm.turnLag+scaled(min(busyNs, maxLag), turnScale, uint64(vm.weight)), maxLag)
	case busyNs < 0:
		d := scaled(min(-max(busyNs, -maxLag), maxLag), turnScale, uint64(vm.weight))
		vm.turnLag = max(vm.turnLag-d, min(vm.turnLag, -turnBank))
	}
}

// NextTurn picks, of the candidates (unknown ids ignored), the VM whose turn
// is next and re-bases every VM's turn lag on it. It reports false if no
// candidate is known.
func (s *Scheduler) NextTurn(candidates []uint32) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *vmState
	for _, id := range candidates {
		vm, ok := s.vms[id]
		if !ok {
			continue
		}
		if best == nil || vm.turnLag < best.turnLag ||
			(vm.turnLag == best.turnLag && s.turnOrder(vm.id) < s.turnOrder(best.id)) {
			best = vm
		}
	}
	if best == nil {
		return 0, false
	}
	adv := best.turnLag
	for _, vm := range s.vms {
		vm.turnLag = max(vm.turnLag-adv, -turnBank)
	}
	s.lastTurn = best.id
	return best.id, true
}

// Behind reports whether id's turn lag is below every one of others'
// (known ones): it would get the turn before any of them. It changes
// nothing; false for an unknown id.
func (s *Scheduler) Behind(id uint32, others []uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, ok := s.vms[id]
	if !ok {
		return false
	}
	for _, o := range others {
		if ov, ok := s.vms[o]; ok && ov.turnLag <= vm.turnLag {
			return false
		}
	}
	return true
}

// turnOrder ranks id for ties: the ids after the last holder first, in
// order, then the ones up to it (round robin).
func (s *Scheduler) turnOrder(id uint32) uint64 {
	if id > s.lastTurn {
		return uint64(id)
	}
	return uint64(id) + 1<<32
}

// TurnLag is a VM's turn lag in ns of GPU time at weight 1 (diagnostic);
// false for an unknown id.
func (s *Scheduler) TurnLag(id uint32) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, ok := s.vms[id]
	if !ok {
		return 0, false
	}
	return vm.turnLag / turnScale, true
}
