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

// spinYieldEvery is how long the goroutine spins between yields to the Go
// scheduler on a host of 4 processors or more. A yield there costs
// microseconds (the goroutine goes to the global run queue, another thread
// is woken, and it resumes on whichever takes it), and a record a guest
// writes meanwhile waits for it: at 2.5 µs a NOP round trip, yielding
// every 100 µs (spin.Period) would delay one round trip in forty, every
// millisecond one in four hundred. Nothing needs it sooner: a goroutine readied on this P is
// stolen by an idle one within microseconds, OnIdle's spinning is capped
// to a core for all VMs, and the runtime preempts a goroutine that runs
// 10 ms.
const spinYieldEvery = time.Millisecond

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
	y := spin.NewEvery(spinYieldEvery)
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
		// Spinning: yield on every pass on a host of fewer than 4
		// processors (internal/spin), every spinYieldEvery on a larger
		// one.
		if !was {
			y.Restart(time.Now())
		}
		y.Idle()
	}
}
