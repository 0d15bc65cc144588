package main

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestVersionAndHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errb, nil); code != 0 || out.String() != "sluice-controller dev\n" {
		t.Fatalf("--version: %d %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"--help"}, &out, &errb, nil); code != 0 ||
		!strings.Contains(out.String(), "Usage:") || !strings.Contains(out.String(), "--bootstrap-token") ||
		!strings.Contains(out.String(), "--heartbeat-timeout duration") || !strings.Contains(out.String(), "SLUICE_CONTROLLER_DB") {
		t.Fatalf("--help: %d %q", code, out.String())
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--db", "postgres://db/%zz"},
		{"--db", "mysql:x"},
		{"--db", "sqlite:"},
		{"--placement", "random"},
		{"--bootstrap-token", "short"},
		{"--tls-cert", "c.pem"},
		{"--no-such-flag"},
		{"extra"},
		{"--heartbeat-timeout", "30"},
		{"--heartbeat-timeout", "10ms"},
	} {
		var errb bytes.Buffer
		if code := run(context.Background(), args, &bytes.Buffer{}, &errb, nil); code != 2 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, errb.String())
		}
		if strings.HasPrefix(args[0], "--") && args[0] != "--no-such-flag" && !strings.Contains(errb.String(), args[0]) {
			t.Errorf("%v: the message %q does not name %s", args, errb.String(), args[0])
		}
	}
}

// start runs the controller on db until the returned stop is called.
func start(t *testing.T, db, token string) (url string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan int, 1)
	var logs bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--db", "sqlite:" + db, "--bootstrap-token", token}, &bytes.Buffer{}, &logs, ready)
	}()
	select {
	case addr := <-ready:
		return "http://" + addr, func() {
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("exit %d: %s", code, logs.String())
			}
		}
	case code := <-done:
		t.Fatalf("exited %d before serving: %s", code, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("not serving after 30s")
	}
	return "", nil
}

func whoami(t *testing.T, url, token string) int {
	req, _ := http.NewRequest("GET", url+"/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func TestBootstrapTokenOnlyOnAnEmptyDatabase(t *testing.T) {
	db := filepath.Join(t.TempDir(), "c.db")
	url, stop := start(t, db, "first-secret-0123456789")
	if s := whoami(t, url, "first-secret-0123456789"); s != 200 {
		t.Fatalf("bootstrap token: %d", s)
	}
	if s := whoami(t, url, "wrong-secret-0123456789"); s != 401 {
		t.Fatalf("another token: %d", s)
	}
	stop()
	// Restarted with another bootstrap token: the database has one, so the
	// new one is not created and the first still works.
	url, stop = start(t, db, "second-secret-0123456789")
	defer stop()
	if s := whoami(t, url, "second-secret-0123456789"); s != 401 {
		t.Fatalf("a second bootstrap token was created: %d", s)
	}
	if s := whoami(t, url, "first-secret-0123456789"); s != 200 {
		t.Fatalf("the first token after a restart: %d", s)
	}
}
