package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/mediator/internal/gpuinv"
	"github.com/sluice-gpu/sluice/mediator/internal/gpuinv/gpuinvtest"
)

func TestControllerFlags(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--socket", filepath.Join(dir, "s.sock"), "--state-dir", filepath.Join(dir, "state"), "--backend", "sim", "--proxy", "off"}
	cfg, _, ctl, err := parseAll(base)
	if err != nil {
		t.Fatal(err)
	}
	if _, join, err := ctl.agentConfig(cfg, gpuinv.Declared{Model: "sim"}, nil); err != nil || join {
		t.Fatalf("without --controller: join %v, %v", join, err)
	}
	for args, want := range map[string]string{
		"--controller http://c:7070": "--controller-token",
		"--controller http://c:7070 --controller-token T --controller-gpus H100":                        "MODEL:SIZE",
		"--controller http://c:7070 --controller-token T --controller-interval 1ms":                     "at least 100ms",
		"--controller http://c:7070 --controller-token T --controller-gpu-memory lots":                  "--controller-gpu-memory",
		"--controller http://c:7070 --controller-token T --controller-host= --controller-gpus sim:1GiB": "--controller-host",
	} {
		if _, _, _, err := parseAll(append(base, strings.Fields(args)...)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error about %s", args, err, want)
		}
	}
	// No GPU in sysfs (a tree without a PCI bus): the default inventory.
	cfg, _, ctl, err = parseAll(append(base, "--controller", "http://c:7070", "--controller-token", "T", "--controller-host", "gpu1",
		"--controller-sysfs", dir))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ac, join, err := ctl.agentConfig(cfg, gpuinv.Declared{Model: "sim"}, quiet)
	if err != nil || !join {
		t.Fatalf("agentConfig: %v %v", join, err)
	}
	if ac.Host != "gpu1" || len(ac.GPUs) != 1 || ac.GPUs[0].Model != "sim" || ac.GPUs[0].MemoryBytes != 1<<30 ||
		ac.GPUs[0].PciAddress != nil || ac.StatePath != filepath.Join(dir, "state", "controller-agent.json") {
		t.Fatalf("agent config %+v", ac)
	}
}

// TestControllerInventoryMerged: on the H100 host's recorded sysfs, the
// cuda backend's GPU (its name, memory and bus id as the driver tells
// them) is reported with the function's PCI data; the sim's GPU there is
// reported without any, the H100 left unused; an operator's address that
// sysfs does not show is refused.
func TestControllerInventoryMerged(t *testing.T) {
	root := gpuinvtest.Tree(t, "h100-host.tar")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := controllerFlags{gpuMemory: "1GiB", sysfs: root}
	cuda := gpuinv.Declared{Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 85017493504, PCIAddress: "00000000:00:06.0"}
	gpus, err := c.inventory(cuda, quiet)
	if err != nil || len(gpus) != 1 || gpus[0].PciAddress == nil || *gpus[0].PciAddress != "0000:00:06.0" ||
		gpus[0].MemoryBytes != 85017493504 || gpus[0].Model != cuda.Model {
		t.Fatalf("cuda on the H100 host: %+v, %v", gpus, err)
	}
	if gpus, err = c.inventory(gpuinv.Declared{Model: "sim"}, quiet); err != nil || len(gpus) != 1 || gpus[0].PciAddress != nil || gpus[0].MemoryBytes != 1<<30 {
		t.Fatalf("sim on the H100 host: %+v, %v", gpus, err)
	}
	c.gpus = "H100:80GiB@0000:41:00.0"
	if _, err := c.inventory(gpuinv.Declared{Model: "sim"}, quiet); err == nil || !strings.Contains(err.Error(), "--controller-gpus") {
		t.Fatalf("an address sysfs does not show: %v", err)
	}
}

// TestListenFlags: --listen and its files fill the TCP host API's config,
// and --listen without a token file is refused at the command line.
func TestListenFlags(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--socket", filepath.Join(dir, "s.sock"), "--state-dir", filepath.Join(dir, "state"), "--proxy", "off"}
	if _, _, _, err := parseAll(append(base, "--listen", "127.0.0.1:7071")); err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("--listen without a token file: %v", err)
	}
	cfg, _, _, err := parseAll(append(base, "--listen", "127.0.0.1:7071", "--listen-token-file", "/etc/sluice/host.token",
		"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.HostTCP; h.Addr != "127.0.0.1:7071" || h.TokenFile != "/etc/sluice/host.token" || h.CertFile != "c.pem" || h.KeyFile != "k.pem" || h.ClientCAFile != "ca.pem" {
		t.Fatalf("HostTCP %+v", h)
	}
}

// TestDoorbellFlags: the doorbell path's settings reach the daemon's
// config, and a bad one is refused.
func TestDoorbellFlags(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--socket", filepath.Join(dir, "s.sock"), "--state-dir", filepath.Join(dir, "state"), "--proxy", "off"}
	cfg, _, _, err := parseAll(append(base, "--doorbell-spin", "20us", "--doorbell-spin-cores", "0.5", "--doorbell-limit", "1000"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DoorbellSpin.Window != 20*time.Microsecond || cfg.DoorbellSpin.Cores != 0.5 || cfg.DoorbellLimit != 1000 {
		t.Fatalf("spin %+v limit %d", cfg.DoorbellSpin, cfg.DoorbellLimit)
	}
	for _, bad := range [][]string{{"--doorbell-spin", "1s"}, {"--doorbell-limit", "-1"}, {"--doorbell-spin", "50"}} {
		if _, _, _, err := parseAll(append(base, bad...)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
