package ivshmem

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/internal/testdeps"
)

// TestQEMUInterop starts a real, paused QEMU with an ivshmem-doorbell
// device on the server and checks that QEMU accepts the handshake, that
// its eventfds reach other peers, and that its exit is broadcast. Fails
// where qemu-system-x86_64 is not installed (internal/testdeps).
func TestQEMUInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	qemu := testdeps.Tool(t, "qemu-system-x86_64", "qemu-system-x86")
	const vectors = 2
	srv, _, events := testServer(t, ServerConfig{Vectors: vectors})
	var stderr bytes.Buffer
	cmd := exec.Command(qemu, "-accel", "tcg", "-S", "-m", "64", "-nodefaults", "-no-user-config",
		"-display", "none", "-serial", "none", "-monitor", "none",
		"-chardev", "socket,path="+srv.cfg.SocketPath+",id=ivs",
		"-device", "ivshmem-doorbell,chardev=ivs,vectors=2")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop := func() { cmd.Process.Kill(); <-exited } // then stderr is safe to read
	t.Cleanup(stop)

	select {
	case e := <-events:
		if e != (peerEvent{1, true}) {
			t.Fatalf("peer event %v, want QEMU as 1 connected", e)
		}
	case <-exited:
		t.Fatalf("QEMU exited: %v\n%s", waitErr, stderr.String())
	case <-timeAfterGuard():
		stop()
		t.Fatalf("QEMU never connected\n%s", stderr.String())
	}

	// QEMU (no KVM irqfd here) polls its own eventfds and resets them: a
	// counter going back to 0 proves it took our fds as its interrupt
	// sources, and as those come last, that it read the whole handshake.
	srv.mu.RLock()
	qemuFDs := srv.peers[1].fds
	srv.mu.RUnlock()
	for v := range vectors {
		if err := srv.Notify(1, v); err != nil {
			t.Fatalf("ringing QEMU's vector %d: %v", v, err)
		}
		eventually(t, fmt.Sprintf("QEMU consuming vector %d", v), func() bool {
			return eventfdCount(t, qemuFDs[v]) == 0
		})
	}

	c := mustDial(t, srv.cfg.SocketPath, vectors)
	recvPeerEvent(t, events)
	if got := c.Peers(); !slices.Equal(got, []uint16{0, 1}) {
		t.Fatalf("client Peers() = %v, want [0 1]", got)
	}
	if err := c.Notify(1, 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "QEMU consuming a peer's doorbell", func() bool {
		return eventfdCount(t, qemuFDs[1]) == 0
	})

	stop()
	if e := recvPeerEvent(t, events); e != (peerEvent{1, false}) {
		t.Fatalf("peer event %v, want 1 disconnected", e)
	}
	eventually(t, "client forgets QEMU", func() bool { return slices.Equal(c.Peers(), []uint16{0}) })
	if stderr.Len() > 0 {
		t.Fatalf("QEMU complained:\n%s", stderr.String())
	}
}

// eventfdCount reads an eventfd's counter from /proc without consuming it.
func eventfdCount(t *testing.T, fd int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "eventfd-count:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("fd %d is not an eventfd:\n%s", fd, b)
	return 0
}
