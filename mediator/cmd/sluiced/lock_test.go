package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets a test run this binary as sluiced: with SLUICED_TEST_MAIN
// set it is the daemon's entry, run with the test's arguments.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICED_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// sluiced starts this test binary as sluiced with args.
func sluiced(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SLUICED_TEST_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, &stderr
}

// waitExit waits for cmd to exit, at most 20 s (then it is killed and the
// test fails): a daemon that should have refused to start serves on.
func waitExit(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s did not exit within 20s", cmd.Path)
		return nil
	}
}

func waitForSocket(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSecondDaemonOnStateDir: a second sluiced on a state dir in use exits
// non-zero naming the first's pid and the dir, without touching the first's
// socket; kill -9 of the first frees the dir for a new one.
func TestSecondDaemonOnStateDir(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	args := func(sock string) []string {
		return []string{"--socket", filepath.Join(dir, sock), "--state-dir", state, "--proxy", "off", "--clock", "virtual"}
	}
	first, _ := sluiced(t, args("a.sock")...)
	waitForSocket(t, filepath.Join(dir, "a.sock"))

	second, stderr := sluiced(t, args("b.sock")...)
	err := waitExit(t, second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("second sluiced on the same state dir: %v, want a non-zero exit; stderr:\n%s", err, stderr)
	}
	msg := stderr.String()
	if pid := strconv.Itoa(first.Process.Pid); !strings.Contains(msg, "process "+pid) || !strings.Contains(msg, state) {
		t.Fatalf("second sluiced's error does not name pid %s and %s:\n%s", pid, state, msg)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused sluiced created its socket: %v", err)
	}

	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	third, stderr := sluiced(t, args("c.sock")...)
	waitForSocket(t, filepath.Join(dir, "c.sock"))
	if err := third.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, third); err != nil {
		t.Fatalf("sluiced after kill -9 of the holder: %v; stderr:\n%s", err, stderr)
	}
}
