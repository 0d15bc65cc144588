package sdnotify

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeManager is a service manager's notification socket.
func fakeManager(t *testing.T) (path string, fd int) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "notify")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	return path, fd
}

// receive reads one notification: its text and the descriptors it carried.
func receive(t *testing.T, fd int) (string, []int) {
	t.Helper()
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*maxFDsPerMessage))
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_DONTWAIT)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	var fds []int
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, got...)
	}
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	return string(buf[:n]), fds
}

func TestStoreAndRemove(t *testing.T) {
	path, mgr := fakeManager(t)
	n := FromEnv(func(k string) string { return map[string]string{"NOTIFY_SOCKET": path}[k] })
	if !n.Enabled() {
		t.Fatal("a notifier with a socket is not enabled")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := n.Store("vm-a.memfd", int(r.Fd()), int(w.Fd())); err != nil {
		t.Fatal(err)
	}
	state, fds := receive(t, mgr)
	if state != "FDSTORE=1\nFDNAME=vm-a.memfd\n" || len(fds) != 2 {
		t.Fatalf("got %q with %d fds, want the store message with 2", state, len(fds))
	}
	// The manager's copy is the same pipe: what is written comes out of it.
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if k, err := unix.Read(fds[0], b[:]); err != nil || k != 1 || b[0] != 'x' {
		t.Fatalf("reading the stored pipe: %d %v", k, err)
	}
	if err := n.Remove("vm-a.memfd"); err != nil {
		t.Fatal(err)
	}
	if state, fds := receive(t, mgr); state != "FDSTOREREMOVE=1\nFDNAME=vm-a.memfd\n" || len(fds) != 0 {
		t.Fatalf("got %q with %d fds", state, len(fds))
	}
	for _, bad := range []string{"", "a:b", "a b", strings.Repeat("x", 256)} {
		if err := n.Store(bad, int(r.Fd())); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	if err := FromEnv(func(string) string { return "" }).Store("x", int(r.Fd())); !errors.Is(err, ErrNoSocket) {
		t.Fatalf("without a socket: %v, want ErrNoSocket", err)
	}
}

func TestListen(t *testing.T) {
	// Three consecutive descriptors stand for systemd's 3, 4 and 5.
	const start = 700
	for i := range 3 {
		if err := unix.Dup2(int(os.Stdin.Fd()), start+i); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(start + i)
	}
	env := map[string]string{"LISTEN_PID": "42", "LISTEN_FDS": "3", "LISTEN_FDNAMES": "a:b:a"}
	got, err := listenFrom(func(k string) string { return env[k] }, 42, start)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got["a"]) != 2 || got["a"][1] != start+2 || len(got["b"]) != 1 || got["b"][0] != start+1 {
		t.Fatalf("got %v", got)
	}
	if flags, _ := unix.FcntlInt(start, unix.F_GETFD, 0); flags&unix.FD_CLOEXEC == 0 {
		t.Fatal("a passed descriptor is inherited by children")
	}
	if got, err := listenFrom(func(k string) string { return env[k] }, 43, start); err != nil || len(got) != 0 {
		t.Fatalf("another process's: %v %v", got, err)
	}
	env["LISTEN_FDS"] = "x"
	if _, err := listenFrom(func(k string) string { return env[k] }, 42, start); err == nil {
		t.Fatal("a bad count accepted")
	}
}
