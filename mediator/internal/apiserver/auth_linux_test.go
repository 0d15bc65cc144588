package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// nobody is the uid (and gid) the cross-user test dials from.
const nobody = 65534

func TestAuthorize(t *testing.T) {
	self := uint32(os.Getuid())
	other := self + 1
	if self == 0 {
		other = nobody
	}
	for _, tc := range []struct {
		name string
		ctx  func(context.Context) context.Context
		ok   bool
	}{
		{"no credentials", func(c context.Context) context.Context { return c }, false},
		{"daemon's user", func(c context.Context) context.Context { return context.WithValue(c, credKey{}, self) }, true},
		{"root", func(c context.Context) context.Context { return context.WithValue(c, credKey{}, uint32(0)) }, true},
		{"other user", func(c context.Context) context.Context { return context.WithValue(c, credKey{}, other) }, false},
		{"wrong type", func(c context.Context) context.Context { return context.WithValue(c, credKey{}, int(self)) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			r := httptest.NewRequest("GET", "/v1/version", nil)
			r = r.WithContext(tc.ctx(r.Context()))
			w := httptest.NewRecorder()
			authorize(Handler(f)).ServeHTTP(w, r)
			if tc.ok {
				if w.Code != http.StatusOK || len(f.Calls()) != 1 {
					t.Errorf("status %d, calls %q; want through", w.Code, f.Calls())
				}
				return
			}
			if w.Code != http.StatusForbidden || len(f.Calls()) != 0 {
				t.Fatalf("status %d, calls %q; want 403 before the service", w.Code, f.Calls())
			}
			got := decodeStrict(t, w.Body.Bytes(), hostapi.Error{}).(hostapi.Error)
			if got.Code != hostapi.CodeForbidden || !strings.Contains(got.Message, "permission denied") {
				t.Errorf("body %+v", got)
			}
		})
	}
}

// TestPeerCredSelf checks that SO_PEERCRED reads the connecting process's
// uid, ours.
func TestPeerCredSelf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cred.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	dialed := make(chan error, 1)
	go func() {
		c, err := net.Dial("unix", path)
		if err == nil {
			_, err = io.Copy(io.Discard, c) // hold it open until the server closes
			c.Close()
		}
		dialed <- err
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	uid, ok := withPeerCred(context.Background(), c).Value(credKey{}).(uint32)
	c.Close()
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
	if !ok || uid != uint32(os.Getuid()) {
		t.Errorf("peer uid %d (recorded %v), want %d", uid, ok, os.Getuid())
	}
	// A connection that is not a UNIX socket carries no credentials, so
	// authorize refuses it.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if v := withPeerCred(context.Background(), a).Value(credKey{}); v != nil {
		t.Errorf("credentials %v on a pipe", v)
	}
}

// TestPeerCredOtherUser dials the server from a child process running as
// nobody and checks it is refused with 403 before the service is called.
func TestPeerCredOtherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the client must run as a second uid (65534), which only root can switch to")
	}
	f := newFake()
	_, path, _ := serve(t, Handler(f), 0o666)
	// The child must reach the socket and run a copy of this test binary.
	dir := filepath.Dir(path)
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "apiserver.test")
	if err := copyFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(guard(t), bin, "-test.run=^TestHelperDialAsOtherUser$", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"SLUICE_TEST_DIAL=" + path, "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child as uid %d: %v\n%s", nobody, err, out)
	}
	if !strings.Contains(string(out), "status=403 code=forbidden") {
		t.Errorf("child as uid %d got:\n%s\nwant status=403 code=forbidden", nobody, out)
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Errorf("the service was called for another user: %q", calls)
	}
}

// TestHelperDialAsOtherUser is the child of TestPeerCredOtherUser.
func TestHelperDialAsOtherUser(t *testing.T) {
	socket := os.Getenv("SLUICE_TEST_DIAL")
	if socket == "" {
		t.Skip("only run as the child of TestPeerCredOtherUser")
	}
	if os.Getuid() == 0 {
		t.Fatal("the child runs as root")
	}
	_, err := hostapi.NewClient(socket).Version(context.Background())
	var re *hostapi.RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("Version as uid %d: %v, want a RemoteError", os.Getuid(), err)
	}
	fmt.Printf("status=%d code=%s\n", re.Status, re.Code)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
