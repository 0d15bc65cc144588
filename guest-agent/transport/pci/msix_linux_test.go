package pci

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testMSIX is an msix over n eventfds the test signals as VFIO would.
func testMSIX(t *testing.T, n int) (*msix, []int) {
	t.Helper()
	m := &msix{}
	var raw []int
	for range n {
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, fd)
		m.fds = append(m.fds, os.NewFile(uintptr(fd), "msix"))
	}
	t.Cleanup(func() { m.close() })
	return m, raw
}

func signal(t *testing.T, fd int) {
	t.Helper()
	if _, err := unix.Write(fd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
}

// expectNone asserts that a 30 ms wait on vector times out.
func expectNone(t *testing.T, m *msix, vector int, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	if err := m.wait(ctx, vector); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait %s: %v, want DeadlineExceeded", when, err)
	}
}

func TestMSIXWait(t *testing.T) {
	m, raw := testMSIX(t, 2)
	ctx := t.Context()

	// A signal wakes a waiter on its vector, and is consumed.
	go func() { time.Sleep(20 * time.Millisecond); signal(t, raw[1]) }()
	if err := m.wait(ctx, 1); err != nil {
		t.Fatalf("signalled wait: %v", err)
	}
	expectNone(t, m, 1, "after the signal was consumed")
	// A deadline a wait left behind neither fails ClearVector nor the
	// next wait (it did: i/o timeout).
	signal(t, raw[1])
	if err := m.clear(1); err != nil {
		t.Fatalf("clear after a timed-out wait: %v", err)
	}
	expectNone(t, m, 1, "after clear")
	signal(t, raw[1])
	if err := m.wait(ctx, 1); err != nil {
		t.Fatalf("wait after a timed-out one: %v", err)
	}

	// Cancelling ends a wait with the context's error; vector 0's signal
	// does not wake vector 1.
	cctx, ccancel := context.WithCancel(ctx)
	signal(t, raw[0])
	go func() { time.Sleep(20 * time.Millisecond); ccancel() }()
	if err := m.wait(cctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if err := m.wait(ctx, 0); err != nil {
		t.Fatalf("vector 0's pending signal: %v", err)
	}
	for _, v := range []int{-1, 2} {
		if err := m.wait(ctx, v); !errors.Is(err, ErrNoInterrupts) {
			t.Errorf("wait on vector %d: %v, want ErrNoInterrupts", v, err)
		}
	}
}
