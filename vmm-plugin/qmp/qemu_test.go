package qmp_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/internal/testdeps"
	"github.com/sluice-gpu/sluice/vmm-plugin/qmp"
	"github.com/sluice-gpu/sluice/vmm-plugin/qmp/qmptest"
)

// TestQEMU runs the client against a real, guestless QEMU. Fails where
// qemu-system-x86_64 is not installed (internal/testdeps).
func TestQEMU(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	qemu := testdeps.Tool(t, "qemu-system-x86_64", "qemu-system-x86")
	sock := qmptest.SocketPath(t, "qmp.sock")
	var stderr bytes.Buffer
	cmd := exec.Command(qemu, "-machine", "none", "-nodefaults", "-no-user-config", "-display", "none",
		"-qmp", "unix:"+sock+",server=on,wait=off", "-S")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })

	ctx := testCtx(t)
	m, err := qmp.DialRetry(ctx, sock) // QEMU may not have created the socket yet
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if v := m.Greeting().Version; v.Major < 7 {
		t.Logf("QEMU %v: written against 7.2", v)
	}

	st, err := m.Status(ctx)
	if err != nil || (st.Status != "prelaunch" && st.Status != "paused") || st.Running {
		t.Fatalf("Status() = %+v, %v; want prelaunch or paused", st, err)
	}

	// Events: subscribed before the commands that cause them.
	events, cancel := m.Subscribe("RESUME", "STOP")
	defer cancel()
	for _, c := range []struct{ cmd, event, status string }{{"cont", "RESUME", "running"}, {"stop", "STOP", "paused"}} {
		if err := m.Execute(ctx, c.cmd, nil, nil); err != nil {
			t.Fatal(err)
		}
		if e := recv(t, events); e.Name != c.event || e.Timestamp.IsZero() {
			t.Fatalf("after %s: event %+v, want %s", c.cmd, e, c.event)
		}
		if st, err := m.Status(ctx); err != nil || st.Status != c.status {
			t.Fatalf("after %s: Status() = %+v, %v", c.cmd, st, err)
		}
	}

	// A client chardev: QEMU connects before chardev-add returns.
	chardevSock := qmptest.SocketPath(t, "chardev.sock")
	ln, err := net.Listen("unix", chardevSock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	if err := m.ChardevAddSocket(ctx, "c0", chardevSock); err != nil {
		t.Fatal(err)
	}
	var peer net.Conn
	select {
	case peer = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("QEMU never connected to the chardev socket")
	}
	defer peer.Close()
	if err := m.ChardevRemove(ctx, "c0"); err != nil {
		t.Fatal(err)
	}
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := peer.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("chardev socket after chardev-remove: %v, want EOF", err)
	}

	// Error replies.
	var qe *qmp.Error
	if err := m.ChardevRemove(ctx, "c0"); !errors.As(err, &qe) || qe.Class != qmp.ClassGenericError {
		t.Fatalf("removing a removed chardev: %v", err)
	}
	if err := m.DeviceAdd(ctx, "no-such-device", "d0", nil); !errors.As(err, &qe) || qe.Command != "device_add" {
		t.Fatalf("adding a bogus device: %v", err)
	} else {
		t.Logf("expected error: %v", err)
	}

	if err := m.Quit(ctx); err != nil {
		t.Fatalf("Quit() = %v", err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("QEMU exited with %v\n%s", waitErr, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("QEMU still running after quit")
	}
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection open after QEMU exited")
	}
	if err := m.Execute(ctx, "query-status", nil, nil); !errors.Is(err, qmp.ErrClosed) {
		t.Fatalf("command after quit: %v", err)
	}
	if stderr.Len() > 0 {
		t.Fatalf("QEMU complained:\n%s", stderr.String())
	}
}
