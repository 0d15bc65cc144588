package cuda

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMain lets this test binary be a GPU worker or the native runner, as
// a binary with cudacmd's subcommands is: spawnProcess and RunNative
// start it again with the role's name as its first argument.
// fakeWorkerCommand makes it a GPU worker on the fake driver (spawnAs), for
// the tests of what happens to worker processes (keep_test.go), and
// runHandoverRole a sluiced handing a VM over by exec (exec_test.go) and
// muteWorkerCommand a worker that stops answering (adopt_test.go).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == fakeWorkerCommand {
		os.Exit(workerMain(func(string) (driver, error) { return newFake(), nil }))
	}
	if len(os.Args) > 1 && os.Args[1] == muteWorkerCommand {
		os.Exit(muteWorker())
	}
	if code, ok := runHandoverRole(os.Args[1:]); ok {
		os.Exit(code)
	}
	os.Exit(MainOr(m.Run))
}

const fakeWorkerCommand = "cuda-worker-fake"

func TestDispatchIgnoresOtherArgs(t *testing.T) {
	for _, args := range [][]string{nil, {}, {"-test.run=X"}, {"cuda-workers"}, {"native", NativeCommand}} {
		if code, ok := Dispatch(args); ok || code != 0 {
			t.Errorf("Dispatch(%q) = %d, %v; want 0, false", args, code, ok)
		}
	}
}

// TestWorkerProcessStarts starts a GPU worker process (this test binary as
// "cuda-worker") with a driver that is not there: it reads its
// configuration, maps the shared block and reports the loader's error.
func TestWorkerProcessStarts(t *testing.T) {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[0])
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	mfd, err := unix.MemfdCreate("shared", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(mfd)
	size := os.Getpagesize()
	if err := unix.Ftruncate(mfd, int64(size)); err != nil {
		t.Fatal(err)
	}
	cfg := workerConfig{VM: 1, Name: "t", Library: "/nonexistent/libcuda.so.1", SharedSize: size}
	p, err := spawnProcess(cfg, workerFiles{sock: sp[1], efd: efd, sharedFD: mfd, heapFD: -1, sysFD: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := sendMsg(sp[0], message{Kind: msgConfig, Config: &cfg}); err != nil {
		p.kill()
		t.Fatal(err)
	}
	m, err := readMsg(sp[0])
	if err != nil || m.Kind != msgError || !strings.Contains(m.Error, "/nonexistent/libcuda.so.1") {
		t.Errorf("the worker said %+v, %v; want the loader's error", m, err)
	}
	if err := p.wait(); err == nil {
		t.Error("a worker that could not start exited 0")
	}
}
