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

// pidfdProc is a worker process adopted from a predecessor (keep.go): a
// child of this process (exec kept the pid) known by a pidfd, so that no
// other process is ever signalled for it. wait reaps it.
type pidfdProc struct {
	pid int

	mu   sync.Mutex // fd against its close
	fd   int        // -1 once reaped
	once sync.Once  // wait's
	err  error      // how it ended (wait)
}

// adoptPidfd checks that fd is a pidfd of a child of this process (dead
// or alive, not yet reaped) and takes a copy of it.
func adoptPidfd(fd int) (*pidfdProc, error) {
	own, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	pid, err := pidOf(own)
	if err == nil {
		err = isChild(pid)
	}
	if err == nil {
		// Still the same process: a child is not reaped behind our back,
		// and its pid not reused until it is.
		var again int
		if again, err = pidOf(own); err == nil && again != pid {
			err = fmt.Errorf("its pid changed from %d to %d", pid, again)
		}
	}
	if err != nil {
		unix.Close(own)
		return nil, err
	}
	return &pidfdProc{pid: pid, fd: own}, nil
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

// wait reaps the process and says how it ended, as exec.Cmd.Wait does.
func (p *pidfdProc) wait() error {
	p.once.Do(func() {
		var ws unix.WaitStatus
		var err error
		for {
			if _, err = unix.Wait4(p.pid, &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
		switch {
		case err != nil:
			p.err = fmt.Errorf("waiting for the GPU worker: %w", err)
		case ws.Signaled():
			p.err = fmt.Errorf("signal: %v", ws.Signal())
		case ws.ExitStatus() != 0:
			p.err = fmt.Errorf("exit status %d", ws.ExitStatus())
		}
		p.mu.Lock()
		unix.Close(p.fd)
		p.fd = -1
		p.mu.Unlock()
	})
	return p.err
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
