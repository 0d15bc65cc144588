package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/sdk/sdktest"
	"github.com/sluice-gpu/sluice/guest-agent/transport/pci"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
)

// endpoint is an ivshmem server whose memfd region a fake host serves.
func endpoint(t *testing.T, cfg sdktest.Config) string {
	t.Helper()
	path, _, _, _ := endpointOf(t, cfg)
	return path
}

// endpointOf is endpoint, with its fake host, the server and the region.
func endpointOf(t *testing.T, cfg sdktest.Config) (string, *sdktest.Host, *ivshmem.Server, *shm.Region) {
	t.Helper()
	if cfg.Layout == (abi.LayoutConfig{}) {
		cfg.Layout = abi.DefaultLayoutConfig()
	}
	size := int64(cfg.Layout.RegionSize)
	fd, err := shm.NewMemfd("sluice-agent-test", size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	mem, err := shm.Map(fd, int(size))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shm.Unmap(mem) })
	h, err := sdktest.Serve(mem, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	dir, err := os.MkdirTemp("", "sa") // short: sun_path holds 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "vm.sock")
	srv, err := ivshmem.NewServer(ivshmem.ServerConfig{
		SocketPath: path, ShmFD: fd, Vectors: abi.Vectors(cfg.Layout.Channels),
		OnDoorbell: func(int, uint64) { h.Kick(); runtime.Gosched() }, // see transport/process's tests
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return path, h, srv, shm.New(mem)
}

// agent runs the command line and returns its standard output.
func agent(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // deadlock guard only
	defer cancel()
	var out bytes.Buffer
	cmd := newRootCmd(&out)
	cmd.SetArgs(args)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func TestInfo(t *testing.T) {
	sock := endpoint(t, sdktest.Config{Epoch: 6})
	out, err := agent(t, "--endpoint", sock, "info", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var in info
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("info --json: %v\n%s", err, out)
	}
	want, _ := abi.NewLayout(abi.DefaultLayoutConfig())
	if in.Layout != want || in.Epoch != 6 || len(in.Channels) != 4 || in.PeerID == nil || *in.PeerID == 0 {
		t.Errorf("info %+v", in)
	}
	out, err = agent(t, "--endpoint", sock, "info")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"host peer    0 (this peer", "epoch        6", "channel 3", "idle"} {
		if !strings.Contains(out, s) {
			t.Errorf("info lacks %q:\n%s", s, out)
		}
	}
}

func TestRunLatency(t *testing.T) {
	sock := endpoint(t, sdktest.Config{})
	out, err := agent(t, "--endpoint", sock, "--spin", "1ms", "run", "latency", "--count", "50", "--warmup", "5", "--channel", "1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Workload  string
		Channel   int
		Count     int
		RoundTrip map[string]int64 `json:"round_trip_ns"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Workload != "latency" || res.Channel != 1 || res.Count != 50 || res.RoundTrip["p50"] <= 0 {
		t.Errorf("result %+v", res)
	}
	out, err = agent(t, "--endpoint", sock, "run", "latency", "--count", "5")
	if err != nil || !strings.Contains(out, "5 round trips") || !strings.Contains(out, "p99") {
		t.Errorf("human latency output %q, %v", out, err)
	}
}

func TestRunThrottle(t *testing.T) {
	sock := endpoint(t, sdktest.Config{})
	// --kernels alone bounds the run, not the default duration.
	out, err := agent(t, "--endpoint", sock, "run", "throttle", "--kernel", "20us", "--sleep", "10us", "--kernels", "7", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Kernels        int   `json:"kernels"`
		SubmittedGPUNs int64 `json:"submitted_gpu_ns"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Kernels != 7 || res.SubmittedGPUNs != 7*20000 {
		t.Errorf("result %+v", res)
	}
	out, err = agent(t, "--endpoint", sock, "run", "throttle", "--kernel", "10us", "--duration", "5ms")
	if err != nil || !strings.Contains(out, "turnaround p50") {
		t.Errorf("human throttle output %q, %v", out, err)
	}
}

func TestErrors(t *testing.T) {
	sock := endpoint(t, sdktest.Config{})
	tooLong := endpoint(t, sdktest.Config{Limits: abi.Limits{MaxThrottleNs: 1000, MaxAllocSize: 1}})
	tests := []struct {
		name string
		args []string
		want string
		is   error
	}{
		{"no region", []string{"info"}, "--endpoint SOCKET", nil},
		{"both modes", []string{"--endpoint", sock, "--device", "info"}, "exclusive", nil},
		{"unreachable", []string{"--endpoint", sock + ".none", "info"}, "joining endpoint", nil},
		{"fewer vectors", []string{"--endpoint", sock, "--vectors", "4", "info"}, "joining endpoint with 4 vectors", nil},
		{"more vectors", []string{"--endpoint", sock, "--vectors", "8", "--connect-timeout", "50ms", "info"}, "joining endpoint with 8 vectors timed out", context.DeadlineExceeded},
		{"channel", []string{"--endpoint", sock, "run", "latency", "--channel", "9"}, "channel 9", sdk.ErrRange},
		{"bad kernel", []string{"--endpoint", sock, "run", "throttle", "--kernel", "0s"}, "must be positive", nil},
		{"kernel without unit", []string{"--endpoint", sock, "run", "throttle", "--kernel", "100"}, `invalid argument "100" for "--kernel" flag`, nil},
		{"old kernel flag", []string{"--endpoint", sock, "run", "throttle", "--kernel-us", "100"}, "replaced by --kernel (a duration such as 100us)", nil},
		{"old sleep flag", []string{"--endpoint", sock, "run", "throttle", "--sleep-us", "100"}, "replaced by --sleep", nil},
		{"too long", []string{"--endpoint", tooLong, "run", "throttle", "--kernels", "1"}, "too long", abi.ErrTooLong},
		{"no device", []string{"--device", "--sysfs", t.TempDir(), "info"}, "PCI devices", nil},
		{"extra arg", []string{"--endpoint", sock, "info", "x"}, "unknown command", nil},
		{"negative mediator timeout", []string{"--endpoint", sock, "--mediator-timeout", "-1s", "run", "latency"}, "must not be negative", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := agent(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
		})
	}
}

// Device mode against a fake sysfs tree of regular files: the region is
// there but no host serves it, so only info works.
func TestDeviceInfo(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "bus", "pci", "devices", "0000:00:04.0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: abi.MinRegionSize, Channels: 1, RingEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	region := make([]byte, l.RegionSize)
	abi.EncodeHeader(region, abi.Header{VersionMajor: abi.VersionMajor, HostPeerID: 2, Layout: l, Epoch: 3})
	for name, b := range map[string][]byte{
		"vendor": []byte("0x1af4\n"), "device": []byte("0x1110\n"), "enable": []byte("0\n"),
		"resource0": make([]byte, 256), "resource2": region,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := agent(t, "--device=00:04.0", "--sysfs", root, "info", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var in info
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if in.HostPeerID != 2 || in.Epoch != 3 || in.Layout != l || in.PeerID == nil {
		t.Errorf("info %+v", in)
	}
	start := time.Now()
	if _, err := agent(t, "--device=00:05.0", "--sysfs", root, "--connect-timeout", "300ms", "info"); !errors.Is(err, pci.ErrNotFound) {
		t.Errorf("absent address: %v, want ErrNotFound", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("absent address: gave up after %v, before --connect-timeout 300ms", d)
	}
}

func TestFS(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in", "a.txt")
	if out, err := agent(t, "fs", "write", path, "the quick\nbrown fox\n"); err != nil {
		t.Fatalf("fs write: %v\n%s", err, out)
	}
	out, err := agent(t, "fs", "read", path)
	if err != nil || out != "the quick\nbrown fox\n" {
		t.Fatalf("fs read = %q, %v", out, err)
	}
	if _, err := agent(t, "fs", "write", path, ""); err != nil {
		t.Fatal(err)
	}
	if out, err := agent(t, "fs", "read", path); err != nil || out != "" {
		t.Fatalf("fs read after truncating write = %q, %v", out, err)
	}
	if err := os.WriteFile(path, make([]byte, maxFSRead+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := agent(t, "fs", "read", path); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("fs read of a file too large: %v", err)
	}
	if _, err := agent(t, "fs", "read", filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fs read of a missing file: %v", err)
	}
}

// TestVersionFlag: --version prints "sluice-agent VERSION", the format of
// every Sluice binary's --version.
func TestVersionFlag(t *testing.T) {
	out, err := agent(t, "--version")
	if err != nil || out != "sluice-agent "+version+"\n" {
		t.Fatalf("--version: %q, %v", out, err)
	}
}

func TestThrottleHelp(t *testing.T) {
	out, err := agent(t, "run", "throttle", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--kernel duration", "--sleep duration", "(default 1ms)"} {
		if !strings.Contains(out, want) {
			t.Errorf("run throttle --help lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "kernel-us") || strings.Contains(out, "sleep-us") {
		t.Errorf("run throttle --help shows the old flags:\n%s", out)
	}
}
