package cuda

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// askPeer plays a worker on the other end of w's socket: to each query it
// sends the answers answer makes of the query.
func askPeer(t *testing.T, answer func(q message) []message) *workerConn {
	t.Helper()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			q, err := readMsg(sp[1])
			if err != nil {
				return
			}
			for _, m := range answer(q) {
				if sendMsg(sp[1], m) != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() { unix.Shutdown(sp[0], unix.SHUT_RDWR); <-done; unix.Close(sp[0]); unix.Close(sp[1]) })
	return &workerConn{sock: sp[0]}
}

// An answer to another query (one a predecessor asked and gave up on),
// which comes before the answer to this one, does not pass for it.
func TestAskPassesOverAnotherQuerysAnswer(t *testing.T) {
	w := askPeer(t, func(q message) []message {
		return []message{
			{Kind: msgState, Nonce: q.Nonce + 2, State: &workerState{Protocol: workerProtocol, Head: 1}}, // the old answer
			{Kind: msgState, Nonce: q.Nonce, State: &workerState{Protocol: workerProtocol, Head: 2}},
		}
	})
	st, pid, err := w.ask(time.Now().Add(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if st.Head != 2 || pid != os.Getpid() {
		t.Fatalf("the answer read: head %d from process %d; want head 2 (this query's) from %d", st.Head, pid, os.Getpid())
	}
}

// A worker of another protocol, which echoes no nonce, is refused at once,
// not after the adoption's time.
func TestAskRefusesAnotherProtocol(t *testing.T) {
	w := askPeer(t, func(message) []message {
		return []message{{Kind: msgState, State: &workerState{Protocol: workerProtocol - 1}}}
	})
	_, _, err := w.ask(time.Now().Add(time.Hour))
	if err == nil || !strings.Contains(err.Error(), "protocol") {
		t.Fatalf("asking a worker of protocol %d: %v, want its protocol refused", workerProtocol-1, err)
	}
}

// muteWorkerCommand makes this test binary a worker (its socket fd 3)
// that answers its first query (busy, on two channels) and no other.
const muteWorkerCommand = "cuda-worker-mute"

func muteWorker() int {
	const sock = 3
	for answered := false; ; {
		m, err := readMsg(sock)
		if err != nil || m.Kind == msgStop {
			return 0
		}
		if m.Kind == msgQuery && !answered {
			answered = true
			st := workerState{Protocol: workerProtocol, Busy: true, Last: []uint64{0, 0}}
			if sendMsg(sock, message{Kind: msgState, State: &st, Nonce: m.Nonce}) != nil {
				return 1
			}
		}
	}
}

// An adoption after a crash has one budget, all of it: a worker that is
// busy and then stops answering is refused once the budget is spent, not
// after a wait for each query.
func TestAdoptionHasOneBudget(t *testing.T) {
	b := procBackend(t)
	b.adoptWait = 300 * time.Millisecond
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[0])
	cmd := exec.Command("/proc/self/exe", muteWorkerCommand)
	cmd.ExtraFiles = []*os.File{os.NewFile(uintptr(sp[1]), "sock")}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd.ExtraFiles[0].Close()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	l := newBlockLayout(2, 64, false)
	shared, err := shm.NewMemfd("mute-shared", int64(l.size))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(shared)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	heap := mapHeap(t, execHeapSize)
	spec := crashSpec(heap.mem, heap.fd, nil, make(chan backend.Completion, 8))
	spec.Adopt = &backend.Kept{Backend: "cuda", FDs: []int{keptSock: sp[0], keptShared: shared, keptDoorbell: efd, keptPidfd: pidfd}}
	start := time.Now()
	_, err = b.Attach(spec)
	took := time.Since(start)
	if !errors.Is(err, backend.ErrBadKept) {
		t.Fatalf("adopting a worker that stops answering: %v, want ErrBadKept", err)
	}
	t.Logf("refused after %v: %v", took, err)
	// queryWait (5 s) for its second query alone, were the budget a step's.
	if took >= queryWait {
		t.Fatalf("refused after %v; the adoption's budget is %v", took, b.adoptWait)
	}
	if !exited(pidfd, 10*time.Second) {
		t.Fatal("the refused worker, proved the VM's, was not ended")
	}
}
