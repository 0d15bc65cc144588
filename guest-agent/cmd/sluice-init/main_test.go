package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/vmm-plugin/qemu"
)

// TestVolumeTag: init mounts the tag QEMU's command line gives the volume.
func TestVolumeTag(t *testing.T) {
	if volumeTag != qemu.VolumeTag {
		t.Errorf("init mounts tag %q, QEMU shares the volume as %q", volumeTag, qemu.VolumeTag)
	}
}

func TestAgentArgs(t *testing.T) {
	for _, tt := range []struct {
		cmdline string
		want    []string
	}{
		{"console=ttyS0 quiet panic=-1\n", []string{"--device", "info"}},
		{"console=ttyS0 sluice.agent=--device,auto,run,throttle,--kernel-us,100 quiet", []string{"--device", "auto", "run", "throttle", "--kernel-us", "100"}},
		{"sluice.agent= quiet", []string{"--device", "info"}},
		{"sluice.agentx=1 sluice.agent=info", []string{"info"}},
	} {
		if got := agentArgs(tt.cmdline); !slices.Equal(got, tt.want) {
			t.Errorf("agentArgs(%q) = %q, want %q", tt.cmdline, got, tt.want)
		}
	}
}

// TestInformational: --version prints "sluice-init VERSION" (the format of
// every Sluice binary's --version) and --help the usage, outside a guest
// too; anything else is left to the init.
func TestInformational(t *testing.T) {
	var out strings.Builder
	if !informational([]string{"--version"}, &out) || out.String() != "sluice-init "+version+"\n" {
		t.Fatalf("--version: %q", out.String())
	}
	out.Reset()
	if !informational([]string{"--help"}, &out) || !strings.Contains(out.String(), "sluice-init --version") {
		t.Fatalf("--help: %q", out.String())
	}
	if informational(nil, &out) || informational([]string{"x"}, &out) {
		t.Fatal("informational answered a run as init")
	}
}
