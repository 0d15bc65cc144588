package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

func TestControllerFlags(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--socket", filepath.Join(dir, "s.sock"), "--state-dir", filepath.Join(dir, "state"), "--backend", "sim", "--proxy", "off"}
	cfg, _, ctl, err := parseAll(base)
	if err != nil {
		t.Fatal(err)
	}
	if _, join, err := ctl.agentConfig(cfg, nil); err != nil || join {
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
	ac, join, err := ctl.agentConfig(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil || !join {
		t.Fatalf("agentConfig: %v %v", join, err)
	}
	if ac.Host != "gpu1" || len(ac.GPUs) != 1 || ac.GPUs[0].Model != "sim" || ac.GPUs[0].MemoryBytes != 1<<30 ||
		ac.StatePath != filepath.Join(dir, "state", "controller-agent.json") {
		t.Fatalf("agent config %+v", ac)
	}
}
