package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMetricsListen: --metrics-listen serves the controller's metrics
// without a token, requests to the API counted.
func TestMetricsListen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port
	if err != nil {
		t.Fatal(err)
	}
	maddr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan int, 1)
	var logs bytes.Buffer
	const token = "metrics-test-token-1234"
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(t.TempDir(), "c.db"),
			"--bootstrap-token", token, "--metrics-listen", maddr}, &bytes.Buffer{}, &logs, ready)
	}()
	var url string
	select {
	case addr := <-ready:
		url = "http://" + addr
	case code := <-done:
		t.Fatalf("exited %d: %s", code, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("not serving after 30s")
	}
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d: %s", code, logs.String())
		}
	}()
	if code := whoami(t, url, token); code != 200 {
		t.Fatalf("whoami: %d", code)
	}
	res, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	body := string(b)
	for _, want := range []string{`sluice_controller_http_requests_total{code="200",route="GET /v1/whoami"} 1`,
		`sluice_controller_hosts{state="up"} 0`, "process_cpu_seconds_total"} {
		if res.StatusCode != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics: %d, no %q in\n%s", res.StatusCode, want, body)
		}
	}
	if res, err := http.Get("http://" + maddr + "/v1/whoami"); err != nil || res.StatusCode != 404 {
		t.Errorf("the API on the metrics listener: %v %v", res.StatusCode, err)
	}
}
