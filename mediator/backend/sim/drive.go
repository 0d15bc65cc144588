package sim

import (
	"math"
	"runtime"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// notifyLocked wakes the loop goroutine if it sleeps through something it
// must do: deliver, process an event earlier than its timer, or quit.
func (s *Sim) notifyLocked() {
	if s.manual || !s.sleeping {
		return
	}
	due := len(s.pending) > 0 || (len(s.events) > 0 && (s.wall && s.events[0].t < s.sleepUntil || !s.wall && !s.heldLocked()))
	if !due && !s.quit {
		return
	}
	s.sleeping = false
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// loop drives the timeline for drive=loop: virtual time jumps from event to
// event; wall time waits for each event's timestamp.
func (s *Sim) loop() {
	defer close(s.loopDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var batch []delivery
	for {
		s.mu.Lock()
		s.sleeping = false
		if s.quit {
			s.mu.Unlock()
			return
		}
		if s.wall {
			s.advanceLocked(s.wallNow())
		} else if len(s.pending) == 0 && len(s.events) > 0 && !s.heldLocked() {
			s.stepLocked()
		}
		if len(s.pending) > 0 {
			batch = s.takePendingLocked(batch)
			s.mu.Unlock()
			s.deliver(batch)
			continue
		}
		if !s.wall && len(s.events) > 0 && !s.heldLocked() {
			s.mu.Unlock()
			continue
		}
		next := int64(math.MaxInt64) // virtual: until woken
		if s.wall && len(s.events) > 0 {
			next = s.events[0].t
		}
		s.sleeping, s.sleepUntil = true, next
		s.mu.Unlock()
		s.sleep(timer, next)
	}
}

// sleep waits for a wake-up or until wall time next, on a timer up to
// SpinNs before it and spinning after.
func (s *Sim) sleep(timer *time.Timer, next int64) {
	if next == math.MaxInt64 {
		<-s.wake
		return
	}
	if d := next - s.wallNow() - s.p.SpinNs; d > 0 {
		timer.Reset(time.Duration(d))
		select {
		case <-s.wake:
			timer.Stop()
			return
		case <-timer.C:
		}
	}
	for s.wallNow() < next {
		select {
		case <-s.wake:
			return
		default:
			runtime.Gosched()
		}
	}
}

func (s *Sim) takePendingLocked(spare []delivery) []delivery {
	b := s.pending
	s.pending = spare[:0]
	return b
}

// deliver runs completions and After functions in order, without locks.
func (s *Sim) deliver(batch []delivery) {
	for i := range batch {
		d := batch[i]
		batch[i] = delivery{}
		if d.vm == nil {
			d.fn()
			continue
		}
		d.vm.complete(d.c)
		if d.vm.undelivered.Add(-1) == 0 && d.vm.closing.Load() {
			select {
			case d.vm.drained <- struct{}{}:
			default:
			}
		}
	}
}

// Run drives the timeline of a drive=manual backend up to until: it
// processes every event at or before until, calling completions and After
// functions as they fall due, then moves Now to until (if it is later).
// Callbacks that Submit or call After extend the run within the same call.
func (s *Sim) Run(until int64) error {
	_, err := s.drive(until, true, -1)
	return err
}

// RunUntilIdle is Run until no event is left. Now stays at the last event.
// With a workload that never stops (a periodic After), it never returns.
func (s *Sim) RunUntilIdle() error {
	_, err := s.drive(math.MaxInt64, false, -1)
	return err
}

// Step processes the next event and delivers what it caused. It reports
// whether there was an event.
func (s *Sim) Step() (bool, error) {
	n, err := s.drive(math.MaxInt64, false, 1)
	return n == 1, err
}

func (s *Sim) drive(until int64, setNow bool, maxSteps int) (int, error) {
	if !s.manual {
		return 0, ErrNotManual
	}
	if !s.driving.CompareAndSwap(false, true) {
		return 0, ErrDriving
	}
	defer s.driving.Store(false)
	var batch []delivery
	steps := 0
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			if s.closed {
				s.mu.Unlock()
				return steps, backend.ErrClosed
			}
			if steps == maxSteps {
				s.mu.Unlock()
				return steps, nil
			}
			if s.heldLocked() && (!setNow || until > s.now) {
				s.progEnd.Wait() // a program holds the timeline: wait for its end
				s.mu.Unlock()
				continue
			}
			if len(s.events) == 0 || s.events[0].t > until {
				if setNow {
					s.setNowLocked(until)
				}
				s.mu.Unlock()
				return steps, nil
			}
			s.stepLocked()
			steps++
		}
		batch = s.takePendingLocked(batch)
		s.mu.Unlock()
		s.deliver(batch)
	}
}

// deliverManual delivers what is pending with drive=manual, unless the
// timeline is being driven already (by this goroutine, from a callback, or
// by another), in which case the driver will.
func (s *Sim) deliverManual() {
	if !s.driving.CompareAndSwap(false, true) {
		return
	}
	defer s.driving.Store(false)
	var batch []delivery
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.mu.Unlock()
			return
		}
		batch = s.takePendingLocked(batch)
		s.mu.Unlock()
		s.deliver(batch)
	}
}
