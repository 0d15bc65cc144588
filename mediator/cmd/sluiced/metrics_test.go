package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/internal/daemon"
)

// TestServeMetrics: --metrics-listen serves a real daemon's /metrics over
// TCP, and only that.
func TestServeMetrics(t *testing.T) {
	dir := t.TempDir()
	cfg, _, ctl, err := parseAll([]string{"--socket", filepath.Join(dir, "s.sock"), "--state-dir", filepath.Join(dir, "state"),
		"--backend", "sim", "--clock", "virtual", "--accounting", "off", "--proxy", "off", "--metrics-listen", "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if ctl.metricsListen != "127.0.0.1:0" {
		t.Fatalf("--metrics-listen parsed as %q", ctl.metricsListen)
	}
	d, err := daemon.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop, err := serveMetrics(addr, d, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/metrics")
	if code != http.StatusOK || !strings.Contains(body, `sluice_daemon_info{accounting="off",arbitration="driver",backend="sim",clock="virtual",policy="none"} 1`) ||
		!strings.Contains(body, "sluice_vms 0") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	if code, _ := get("/v1/vms"); code != http.StatusNotFound {
		t.Errorf("/v1/vms over the metrics listener: %d, want 404", code)
	}
	if _, err := serveMetrics(addr, d, nil); err == nil || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Errorf("a second listener on %s: %v", addr, err)
	}
}
