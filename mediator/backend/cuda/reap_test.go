package cuda

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/internal/testlog"
)

// leaderExitsFirstCommand makes this test binary a process whose first
// thread exits (exit, not exit_group) while the others go on until its
// stdin closes, and then exit the process 0: what a SIGKILLed worker
// looks like between its first thread's exit and its last's.
const leaderExitsFirstCommand = "cuda-leader-exits-first"

func init() {
	if len(os.Args) < 2 || os.Args[1] != leaderExitsFirstCommand {
		return
	}
	// init runs on the first thread (the runtime locks it there).
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	syscall.Syscall(unix.SYS_EXIT, 0, 0, 0)
}

// TestReapWaitsForEveryThread lets go of a child whose first thread is a
// zombie while another still runs: a wait finds nothing to reap then (why
// a single WNOHANG wait left a killed worker a zombie for good), and
// reapWhenEnded reaps it once the last thread has exited.
func TestReapWaitsForEveryThread(t *testing.T) {
	logs := testlog.Capture(t)
	cmd := exec.Command(os.Args[0], leaderExitsFirstCommand)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close() // the child ends
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !zombie(pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			unix.Close(fd)
			t.Fatal("the child's first thread did not exit")
		}
	}
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) < 2 {
		t.Fatalf("%d threads left in the child, want its first and more", len(tasks))
	}
	if done, how, err := reapNow(fd); done || err != nil {
		t.Fatalf("reaped a child with %d threads left: %s, %v", len(tasks), how, err)
	}
	reapWhenEnded(fd, pid)
	time.Sleep(10 * time.Millisecond) // the reaper waits on its pidfd
	if !zombie(pid) {
		t.Fatal("the child was reaped before its last thread exited")
	}
	stdin.Close()
	reaped(t, pid)
	logs.Wait(t, fmt.Sprintf(`pid=%d how="exit status 0"`, pid), 10*time.Second)
}

// TestReapKilled reaps a child let go of that is killed later, and says
// so.
func TestReapKilled(t *testing.T) {
	logs := testlog.Capture(t)
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal(err)
	}
	if done, how, err := reapNow(fd); done || err != nil {
		t.Fatalf("reaped a running child: %s, %v", how, err)
	}
	reapWhenEnded(fd, pid)
	time.Sleep(10 * time.Millisecond) // the reaper waits on its pidfd
	if !alive(pid) {
		t.Fatal("the child let go of ended")
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	reaped(t, pid)
	logs.Wait(t, fmt.Sprintf(`pid=%d how="signal: killed"`, pid), 10*time.Second)
}
