package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// pidfdProc is a worker process adopted from a predecessor (keep.go),
// known by a pidfd, so that no other process is ever signalled for it:
// after a hand-over a child of this process (exec kept the pid), after a
// crash of the predecessor its orphan (its parent is then the service
// manager, or whatever reaps orphans). wait reaps a child, and waits for
// the end of another.
type pidfdProc struct {
	pid   int
	child bool // a child of this process: wait reaps it

	mu   sync.Mutex // fd against its close
	fd   int        // -1 once waited for
	once sync.Once  // wait's
	err  error      // how it ended (wait)
}

// adoptPidfd checks that fd is a pidfd of a process not yet reaped, and
// takes a copy of it. Nothing says yet that the process is a GPU worker:
// adoptProcess proves that before anything signals it.
func adoptPidfd(fd int) (*pidfdProc, error) {
	own, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	pid, err := pidOf(own)
	if err != nil {
		unix.Close(own)
		return nil, err
	}
	p := &pidfdProc{pid: pid, fd: own}
	// A child is not reaped behind our back, so its pid is not reused
	// until we reap it; another's may be, but the pidfd still names only
	// its own process (same checks that).
	p.child = isChild(pid) == nil
	if err := p.same(); err != nil {
		unix.Close(own)
		return nil, err
	}
	return p, nil
}

// same checks that the pidfd's process is still there (not reaped) with
// pid p.pid.
func (p *pidfdProc) same() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return errors.New("the GPU worker was waited for")
	}
	again, err := pidOf(p.fd)
	if err == nil && again != p.pid {
		err = fmt.Errorf("its pid changed from %d to %d", p.pid, again)
	}
	return err
}

// release lets go of a process that was not proved a GPU worker: nothing
// signals it. A child is reaped once it has ended, dead already or later
// (reapWhenEnded: through the pidfd, only that process), so that it does
// not stay a zombie.
func (p *pidfdProc) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return
	}
	if p.child {
		reapWhenEnded(p.fd, p.pid)
	} else {
		unix.Close(p.fd)
	}
	p.fd = -1
}

// isAnon checks that fd is an anonymous inode of kind ("[eventfd]").
func isAnon(fd int, kind string) error {
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return err
	}
	if link != "anon_inode:"+kind {
		return fmt.Errorf("descriptor %d is %q, not %s", fd, link, kind)
	}
	return nil
}

// pidOf is the pid a pidfd refers to (its fdinfo's Pid).
func pidOf(fd int) (int, error) {
	if err := isAnon(fd, "[pidfd]"); err != nil {
		return 0, err
	}
	info, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(info) {
		if v, ok := bytes.CutPrefix(line, []byte("Pid:")); ok {
			pid, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil || pid <= 0 {
				return 0, fmt.Errorf("the pidfd's process is gone (pid %q)", bytes.TrimSpace(v))
			}
			return pid, nil
		}
	}
	return 0, errors.New("the pidfd's fdinfo names no pid")
}

// isChild checks that pid is a child of this process.
func isChild(pid int) error {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return err
	}
	// pid (comm) state ppid ...: comm may hold anything but ends at the
	// last parenthesis.
	i := bytes.LastIndexByte(stat, ')')
	f := bytes.Fields(stat[i+1:])
	if i < 0 || len(f) < 2 {
		return fmt.Errorf("process %d: an unreadable stat", pid)
	}
	if ppid, err := strconv.Atoi(string(f[1])); err != nil || ppid != os.Getpid() {
		return fmt.Errorf("process %d is not a child of this process (its parent: %s)", pid, f[1])
	}
	return nil
}

func (p *pidfdProc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd >= 0 {
		_ = unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0)
	}
}

// wait waits for the process's end and says how it ended, as
// exec.Cmd.Wait does; a child is reaped. Another's exit status is its
// parent's to see: its end is all wait reports then.
func (p *pidfdProc) wait() error {
	p.once.Do(func() {
		if p.child {
			p.err = p.reap()
		} else {
			p.err = p.waitExit()
		}
		p.mu.Lock()
		unix.Close(p.fd)
		p.fd = -1
		p.mu.Unlock()
	})
	return p.err
}

// reap waits for the child to end and reaps it.
func (p *pidfdProc) reap() error {
	var ws unix.WaitStatus
	var err error
	for {
		if _, err = unix.Wait4(p.pid, &ws, 0, nil); err != unix.EINTR {
			break
		}
	}
	switch {
	case err != nil:
		return fmt.Errorf("waiting for the GPU worker: %w", err)
	case ws.Signaled():
		return fmt.Errorf("signal: %v", ws.Signal())
	case ws.ExitStatus() != 0:
		return fmt.Errorf("exit status %d", ws.ExitStatus())
	}
	return nil
}

// waitExit waits until the process has ended (its pidfd reads ready).
func (p *pidfdProc) waitExit() error {
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return fmt.Errorf("waiting for the GPU worker: %w", err)
		}
		return nil
	}
}

func (p *pidfdProc) pidfd() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return -1, errors.New("the GPU worker was reaped")
	}
	fd, err := unix.FcntlInt(uintptr(p.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("copying the GPU worker's pidfd: %w", err)
	}
	return fd, nil
}
