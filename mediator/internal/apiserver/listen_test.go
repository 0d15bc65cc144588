package apiserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// guard bounds a test's waits. It is a deadlock guard, never a timing
// assertion: nothing here should come near it.
func guard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// serve starts a Server for h on a socket in a temporary directory and
// shuts it down when the test ends, checking that Serve returns cleanly.
func serve(t *testing.T, h http.Handler, mode os.FileMode) (*Server, string, <-chan error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluiced.sock")
	srv, err := Listen(path, mode, h)
	if err != nil {
		t.Fatal(err)
	}
	return srv, path, run(t, srv)
}

// run serves srv until the test ends, then shuts it down and checks that
// Serve returned cleanly.
func run(t *testing.T, srv *Server) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	t.Cleanup(func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return done
}

// TestClientOverSocket runs the hostapi client against the real handler,
// credential check included, on a real UNIX socket.
func TestClientOverSocket(t *testing.T) {
	f := newFake()
	f.stats = sampleStats()
	_, path, _ := serve(t, Handler(f), 0o600)
	c := hostapi.NewClient(path)
	ctx := guard(t)

	v, err := c.Version(ctx)
	if err != nil || v != f.version {
		t.Fatalf("Version = %+v, %v; want %+v", v, err, f.version)
	}
	vm, err := c.CreateVM(ctx, hostapi.CreateVMRequest{Name: "a", Weight: 3})
	if err != nil || vm.Name != "a" || vm.Weight != 3 || !vm.Created.Equal(created) {
		t.Fatalf("CreateVM = %+v, %v", vm, err)
	}
	if got, err := c.GetVM(ctx, "a"); err != nil || got != vm {
		t.Errorf("GetVM = %+v, %v; want %+v", got, err, vm)
	}
	if got, err := c.ListVMs(ctx); err != nil || !reflect.DeepEqual(got, []hostapi.VM{vm}) {
		t.Errorf("ListVMs = %+v, %v", got, err)
	}
	if got, err := c.Stats(ctx); err != nil || !reflect.DeepEqual(got, f.stats) {
		t.Errorf("Stats = %+v, %v; want %+v", got, err, f.stats)
	}
	if err := c.DeleteVM(ctx, "a"); err != nil {
		t.Fatalf("DeleteVM: %v", err)
	}
	if u, err := c.Usage(ctx, "a"); err != nil || u != (hostapi.Usage{Name: "a", Since: created}) {
		t.Errorf("Usage after delete = %+v, %v", u, err)
	}
	if got, err := c.ListVMs(ctx); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListVMs after delete = %#v, %v; want an empty slice", got, err)
	}
}

func TestClientErrorsOverSocket(t *testing.T) {
	f := newFake()
	_, path, _ := serve(t, Handler(f), 0o600)
	c := hostapi.NewClient(path)
	ctx := guard(t)
	sentinels := []error{hostapi.ErrNotFound, hostapi.ErrExists, hostapi.ErrInvalid, hostapi.ErrUnavailable}
	check := func(name string, err, want error, message string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		for _, s := range sentinels {
			if errors.Is(err, s) != (s == want) {
				t.Errorf("%s: errors.Is(%q, %q) = %v", name, err, s, s != want)
			}
		}
		// The server's message comes back once, as it is: the client adds
		// neither the sentinel's text nor the status.
		if err.Error() != message {
			t.Errorf("%s: message %q, want %q", name, err, message)
		}
	}
	_, err := c.GetVM(ctx, "gone")
	check("GetVM", err, hostapi.ErrNotFound, `vm "gone": not found`)
	var re *hostapi.RemoteError
	if !errors.As(err, &re) || re.Status != http.StatusNotFound || re.Code != hostapi.CodeNotFound {
		t.Errorf("GetVM: %#v, want a 404 not_found RemoteError", err)
	}
	check("DeleteVM", c.DeleteVM(ctx, "gone"), hostapi.ErrNotFound, `vm "gone": not found`)
	_, err = c.Usage(ctx, "gone")
	check("Usage", err, hostapi.ErrNotFound, `vm "gone": not found`)
	_, err = c.CreateVM(ctx, hostapi.CreateVMRequest{})
	check("CreateVM no name", err, hostapi.ErrInvalid, `vm name "": invalid request`)
	if _, err := c.CreateVM(ctx, hostapi.CreateVMRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateVM(ctx, hostapi.CreateVMRequest{Name: "a"})
	check("CreateVM twice", err, hostapi.ErrExists, `vm "a": already exists`)

	f.mu.Lock()
	f.fail = errors.New("disk on fire")
	f.mu.Unlock()
	_, err = c.Stats(ctx)
	check("Stats failing", err, nil, "disk on fire")
	if !errors.As(err, &re) || re.Status != http.StatusInternalServerError || re.Code != hostapi.CodeInternal {
		t.Errorf("Stats: %#v, want a 500 internal RemoteError", err)
	}
}

// TestMetricsOverSocket checks /metrics through the socket, credential
// check included, as a scraper sees it.
func TestMetricsOverSocket(t *testing.T) {
	f := newFake()
	f.stats = sampleStats()
	_, path, _ := serve(t, Handler(f), 0o600)
	resp, body := get(t, path, "/metrics")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	fams := parseProm(t, body)
	if got, ok := vmValue(fams, "sluice_vm_doorbells_total", "busy"); !ok || got != 42 {
		t.Errorf("sluice_vm_doorbells_total{vm=busy} = %v (%v), want 42", got, ok)
	}
}

// get sends one GET over the socket with a plain HTTP client.
func get(t *testing.T, socket, path string) (*http.Response, string) {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	req, err := http.NewRequestWithContext(guard(t), http.MethodGet, "http://sluiced"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestListenRefusesLiveSocket(t *testing.T) {
	_, path, _ := serve(t, Handler(newFake()), 0o600)
	if srv, err := Listen(path, 0o600, Handler(newFake())); err == nil || !strings.Contains(err.Error(), "another daemon is listening") {
		if srv != nil {
			_ = srv.Shutdown(context.Background())
		}
		t.Fatalf("second Listen on a live socket: %v, want refused", err)
	}
	// The refused Listen must have left the live daemon's socket alone.
	if _, err := hostapi.NewClient(path).Version(guard(t)); err != nil {
		t.Errorf("the first server stopped answering: %v", err)
	}
}

func TestListenReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluiced.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := ln.Close(); err != nil { // what a daemon that crashed leaves
		t.Fatal(err)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("no stale socket to test with: %v", err)
	}
	srv, err := Listen(path, 0o600, Handler(newFake()))
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-done
	})
	if _, err := hostapi.NewClient(path).Version(guard(t)); err != nil {
		t.Errorf("Version on the replaced socket: %v", err)
	}
}

// TestListenRefusesNonSocket pins that a mistyped path never deletes a file
// or a directory.
func TestListenRefusesNonSocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "state.json")
	if err := os.WriteFile(file, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{file, sub} {
		if srv, err := Listen(path, 0o600, Handler(newFake())); err == nil {
			_ = srv.Shutdown(context.Background())
			t.Errorf("Listen(%s) succeeded over something that is not a socket", path)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "precious" {
		t.Errorf("file after Listen: %q, %v", b, err)
	}
	if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
		t.Errorf("directory after Listen: %v", err)
	}
}

func TestListenMode(t *testing.T) {
	for _, mode := range []os.FileMode{0o600, 0o660, 0o666} {
		t.Run(mode.String(), func(t *testing.T) {
			_, path, _ := serve(t, Handler(newFake()), mode)
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != mode {
				t.Errorf("socket mode %v, want a socket with %v", fi.Mode(), mode)
			}
		})
	}
}

func TestShutdownRemovesSocket(t *testing.T) {
	t.Run("serving", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sluiced.sock")
		srv, err := Listen(path, 0o600, Handler(newFake()))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve() }()
		// A request proves Serve has taken the listener before Shutdown.
		if _, err := hostapi.NewClient(path).Version(guard(t)); err != nil {
			t.Fatal(err)
		}
		if err := srv.Shutdown(guard(t)); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve after Shutdown: %v, want nil", err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket after Shutdown: %v, want it gone", err)
		}
	})
	t.Run("never served", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sluiced.sock")
		srv, err := Listen(path, 0o600, Handler(newFake()))
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Shutdown(guard(t)); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket after Shutdown: %v, want it gone", err)
		}
		if err := srv.Serve(); err != nil {
			t.Errorf("Serve after Shutdown: %v, want nil", err)
		}
	})
}

// TestShutdownFinishesRequests checks that a request in flight when
// Shutdown starts still gets its answer.
func TestShutdownFinishesRequests(t *testing.T) {
	f := newFake()
	f.block, f.entered = make(chan struct{}), make(chan struct{})
	path := filepath.Join(t.TempDir(), "sluiced.sock")
	srv, err := Listen(path, 0o600, Handler(f))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	ctx := guard(t)
	type result struct {
		v   hostapi.Version
		err error
	}
	got := make(chan result, 1)
	go func() {
		v, err := hostapi.NewClient(path).Version(ctx)
		got <- result{v, err}
	}()
	select {
	case <-f.entered:
	case <-ctx.Done():
		t.Fatal("the request never reached the service")
	}
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(ctx) }()
	// Wait for Shutdown to have closed the listener (the socket goes with
	// it) while the request is still held, then let the request finish.
	for {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("Shutdown never closed the listener")
		case <-time.After(time.Millisecond):
		}
	}
	close(f.block)
	if r := <-got; r.err != nil || r.v != f.version {
		t.Errorf("request in flight during Shutdown: %+v, %v", r.v, r.err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
