package cuda

import (
	"fmt"
	"log/slog"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reapWhenEnded reaps child pid, named by pidfd fd (which it takes over),
// once it has ended: a kept worker let go of (pidfdProc.release), dead
// already or told to stop, must not stay a zombie of a long-lived
// mediator. A goroutine waits on the runtime's poller (no thread) for the
// pidfd to read ready, which it does only once every thread of the
// process has exited, and then reaps it through the pidfd (only that
// process). A wait without it is not enough: a SIGKILL of a
// multi-threaded worker makes its first thread a zombie (so /proc says)
// while the others are still exiting (tearing its memory down), and until
// they have the kernel has nothing to report, so a WNOHANG wait finds
// nothing, and later no one would look again. How it ended is logged.
//
// The pidfd came with a kept state: it names a process started before
// this one took over, never one an exec.Cmd of this process waits for.
func reapWhenEnded(fd, pid int) {
	go func() {
		how, err := reapEnded(fd)
		if err != nil {
			slog.Warn("cuda: a GPU worker let go of could not be reaped", "pid", pid, "err", err)
			return
		}
		slog.Info("cuda: a GPU worker let go of ended", "pid", pid, "how", how)
	}()
}

// reapEnded waits for the process of pidfd fd to end, reaps it and says
// how it ended; it closes fd.
func reapEnded(fd int) (how string, err error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		defer unix.Close(fd)
		return waitReaped(fd)
	}
	f := os.NewFile(uintptr(fd), "pidfd") // non-blocking: on the poller
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return "", fmt.Errorf("waiting for the GPU worker: %w", err)
	}
	if perr := rc.Read(func(fd uintptr) bool {
		var done bool
		done, how, err = reapNow(int(fd))
		return done
	}); perr != nil { // not on the poller: a thread waits
		if cerr := rc.Control(func(fd uintptr) { how, err = waitReaped(int(fd)) }); cerr != nil {
			return "", fmt.Errorf("waiting for the GPU worker: %w", cerr)
		}
	}
	return how, err
}

// waitReaped polls the pidfd until it reads ready (blocking the thread),
// then reaps its process.
func waitReaped(fd int) (string, error) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		done, how, err := reapNow(fd)
		if done {
			return how, err
		}
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return "", fmt.Errorf("waiting for the GPU worker: %w", err)
		}
	}
}

// Codes of a child's siginfo (waitid).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// childInfo is the start of a siginfo_t that waitid filled in for a child.
type childInfo struct {
	signo, errno, code, _ int32
	pid, uid, status      int32
}

// reapNow reaps the pidfd's process if it has ended (done, and how), or
// says it has not (not done). An error (done) says it cannot be reaped,
// already reaped, say.
func reapNow(fd int) (done bool, how string, err error) {
	var info unix.Siginfo
	for {
		err = unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return true, "", fmt.Errorf("reaping the GPU worker: %w", err)
	}
	c := (*childInfo)(unsafe.Pointer(&info))
	if c.signo == 0 { // nothing to report yet
		return false, "", nil
	}
	switch c.code {
	case cldExited:
		return true, fmt.Sprintf("exit status %d", c.status), nil
	case cldKilled, cldDumped:
		return true, fmt.Sprintf("signal: %v", unix.Signal(c.status)), nil
	}
	return true, fmt.Sprintf("code %d, status %d", c.code, c.status), nil
}
