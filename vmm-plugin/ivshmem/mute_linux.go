package ivshmem

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// mutes is the epoll goroutine's storm state (limit.go): only that
// goroutine touches it.
type mutes struct {
	lim   limiter
	muted []bool // by vector: left out of epoll
	after []bool // by vector: its next read carries signals taken while muted
	until int64  // when the mutes end (monotonic ns); 0: none muted
	epoch time.Time
}

func (s *Server) initMutes() {
	s.mute = mutes{
		lim:   newLimiter(s.cfg.DoorbellLimit),
		muted: make([]bool, s.cfg.Vectors),
		after: make([]bool, s.cfg.Vectors),
		epoch: time.Now(),
	}
}

// mono is monotonic ns since the server started.
func (m *mutes) mono() int64 { return int64(time.Since(m.epoch)) + 1 }

// limit counts a doorbell read from vector's eventfd (count signals) and
// mutes the vector when it is over the limit; it adds to Limited the
// signals that arrived while the vector was muted. Doorbells read while
// OnIdle keeps the goroutine spinning are not counted: they cost a read
// in a loop that runs anyway, not a wakeup, and a guest whose every
// command the spin finds before its doorbell must not be muted for
// ringing often.
func (s *Server) limit(vector int, count uint64, spinning bool) {
	m := &s.mute
	if m.after[vector] {
		m.after[vector] = false
		s.limited.Add(count)
	}
	if m.lim.perNs == 0 || spinning {
		return
	}
	now := m.mono()
	if m.lim.allow(now, count) || m.muted[vector] {
		return
	}
	if err := s.setInterest(vector, 0); err != nil {
		return // not muted: the storm goes on costing, nothing is lost
	}
	m.muted[vector] = true
	if m.until == 0 {
		m.until = now + int64(MuteFor)
	}
	if s.cfg.OnLimit != nil {
		s.cfg.OnLimit(vector)
	}
}

// unmuteDue ends the mutes whose time has come; level-triggered epoll then
// reports the vectors whose guests rang meanwhile.
func (s *Server) unmuteDue() {
	m := &s.mute
	if m.until == 0 || m.mono() < m.until {
		return
	}
	m.until = 0
	for v, muted := range m.muted {
		if muted && s.setInterest(v, unix.EPOLLIN) == nil {
			m.muted[v], m.after[v] = false, true
		}
	}
}

// waitTimeout is pollLoop's epoll timeout: 0 while spinning, until the
// mutes end (at least 1 ms, epoll's unit) while some vector is muted, and
// forever otherwise.
func (s *Server) waitTimeout(spin bool) int {
	switch {
	case spin:
		return 0
	case s.mute.until != 0:
		left := time.Duration(s.mute.until - s.mute.mono())
		return max(1, int((left+time.Millisecond-1)/time.Millisecond))
	}
	return -1
}

// setInterest sets the epoll events the host eventfd of vector is watched
// for (0: none, the vector is muted).
func (s *Server) setInterest(vector int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(vector)}
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_MOD, s.hostFDs[vector], &ev); err != nil {
		return fmt.Errorf("setting epoll interest of vector %d: %w", vector, err)
	}
	return nil
}

// Limited is how many guest signals arrived on vectors muted for ringing
// faster than ServerConfig.DoorbellLimit (and were taken in one read each
// when the mute ended).
func (s *Server) Limited() uint64 { return s.limited.Load() }
