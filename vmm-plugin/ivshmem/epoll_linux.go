package ivshmem

import (
	"fmt"
	"runtime"
	"time"

	"github.com/sluice-gpu/sluice/internal/spin"
	"golang.org/x/sys/unix"
)

// wakeTag marks the wake eventfd in epoll's user data; the host eventfds
// carry their vector number there.
const wakeTag = -1

func (s *Server) setupEpoll() error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("creating epoll: %w", err)
	}
	s.epfd = epfd
	add := func(fd int, tag int32) error {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: tag}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return fmt.Errorf("adding fd %d to epoll: %w", fd, err)
		}
		return nil
	}
	if err := add(s.wakefd, wakeTag); err != nil {
		return err
	}
	for v, fd := range s.hostFDs {
		if err := add(fd, int32(v)); err != nil {
			return err
		}
	}
	return nil
}

// pollLoop delivers the host peer's doorbells. Level-triggered epoll and
// non-blocking reads: an eventfd left unread (more ready fds than events)
// is reported again on the next wait. Nothing here allocates per doorbell
// and no lock is held across OnDoorbell. While OnIdle asks for it the waits
// do not block; a muted vector (mute_linux.go) waits at most until its
// mute ends.
func (s *Server) pollLoop() {
	defer s.wg.Done()
	events := make([]unix.EpollEvent, 64)
	var buf [8]byte
	spinning := false
	y := spin.New()
	for {
		n, err := unix.EpollWait(s.epfd, events, s.waitTimeout(spinning))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return // only EBADF/EINVAL, i.e. a bug: there is no one to tell
		}
		for i := range n {
			tag := events[i].Fd
			if tag == wakeTag {
				return
			}
			count, ok, err := drain(s.hostFDs[tag], &buf)
			if err == nil && ok {
				s.limit(int(tag), count, spinning)
				s.cfg.OnDoorbell(int(tag), count)
			}
		}
		s.unmuteDue()
		was := spinning
		spinning = s.cfg.OnIdle != nil && s.cfg.OnIdle()
		if !spinning {
			// A goroutine the callbacks readied (a backend's
			// dispatcher, say) sits in this P's run queue; blocking in
			// EpollWait now would strand it until sysmon retakes the P
			// (20 µs to 10 ms). Let it run first.
			runtime.Gosched()
			continue
		}
		// Spinning: yield as internal/spin says, on every pass on a host
		// of fewer than 4 processors, every spin.Period on a larger one,
		// where a yield costs microseconds (it wakes another thread,
		// and the goroutine resumes on whichever took it from the
		// global queue) and a goroutine readied here is stolen by an
		// idle processor within a few.
		if !was {
			y.Restart(time.Now())
		}
		y.Idle()
	}
}
