package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

func TestRenderVMTable(t *testing.T) {
	if got := RenderVMTable([]hostapi.VM{vmBatch, vmWeb}); got != wantVMTable {
		t.Errorf("got\n%s\nwant\n%s", got, wantVMTable)
	}
	// Escape sequences from the daemon must not reach the terminal.
	evil := hostapi.VM{Name: "x\x1b[2Jy", ID: 1234567, State: "wait\ning"}
	want := "NAME         ID  WEIGHT  CAP  CHANNELS  STATE     PEERS  ENDPOINT\n" +
		"x?[2Jy  1234567       0    -         0  wait?ing      0\n"
	if got := RenderVMTable([]hostapi.VM{evil}); got != want {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}

func TestRenderVM(t *testing.T) {
	if got := RenderVM(vmWeb); got != wantVMGet {
		t.Errorf("got\n%s\nwant\n%s", got, wantVMGet)
	}
	// Times print in UTC whatever the zone the daemon used.
	vm := vmWeb
	vm.Created = t0.In(time.FixedZone("X", 3600))
	vm.HeapSize = 0
	vm.Memory, vm.MemoryUsed = 0, 1000
	vm.InflightBudgetNs, vm.InflightNs, vm.EstimateNs, vm.BudgetStalls = 0, 1500, 0, 7
	want := wantVMGet[:len(wantVMGet)-len("Heap size:     3 MiB (3145728 bytes)\nMemory:        1.5 GiB used, quota 8 GiB\n"+
		"In flight:     2ms of a 3.25ms budget, a kernel or copy costed 100µs, 1 stall for room\nCreated:       2026-05-09T12:00:00Z\n")] +
		"Heap size:     -\nMemory:        1000 B used, no quota\n" +
		"In flight:     1.5µs, no budget, kernels and copies not measured yet, 7 stalls for room\nCreated:       2026-05-09T12:00:00Z\n"
	if got := RenderVM(vm); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestRenderPolicy(t *testing.T) {
	for _, tt := range []struct {
		in   hostapi.PolicyState
		want string
	}{
		{hostapi.PolicyState{Policy: "dfq", Accounting: "loga"}, wantPolicy},
		{hostapi.PolicyState{Policy: "timeslice", Accounting: "off"},
			"Policy:      timeslice (engaged round robin, a baseline)\nAccounting:  off\n"},
		// A policy this sluicectl does not know is shown as it is, cleaned.
		{hostapi.PolicyState{Policy: "new\x1b[2J"}, "Policy:      new?[2J\nAccounting:  -\n"},
	} {
		if got := RenderPolicy(tt.in); got != tt.want {
			t.Errorf("RenderPolicy(%+v) =\n%q\nwant\n%q", tt.in, got, tt.want)
		}
	}
}

func TestRenderVMCap(t *testing.T) {
	for _, tt := range []struct {
		cap        float64
		cell, line string
	}{
		{0, "-", "none"},
		{0.25, "25%", "25% of the GPU (enforced under policy cap)"},
		{1.0 / 3, "33.33%", "33.33% of the GPU (enforced under policy cap)"},
		{1, "100%", "100% of the GPU (enforced under policy cap)"},
	} {
		vm := vmWeb
		vm.Cap = tt.cap
		if got := RenderVM(vm); !strings.Contains(got, "\nCap:           "+tt.line+"\n") {
			t.Errorf("cap %v: RenderVM lacks %q:\n%s", tt.cap, tt.line, got)
		}
		if got := strings.Fields(strings.Split(RenderVMTable([]hostapi.VM{vm}), "\n")[1])[3]; got != tt.cell {
			t.Errorf("cap %v: table cell %q, want %q", tt.cap, got, tt.cell)
		}
	}
}

func TestRenderUsage(t *testing.T) {
	if got := RenderUsage(usageWeb); got != wantUsage {
		t.Errorf("got\n%s\nwant\n%s", got, wantUsage)
	}
	want := "VM:        b\nGPU time:  0.000000 s (999 ns)\nKernels:   0\nCommands:  0\nErrors:    0\nSince:     -\n"
	if got := RenderUsage(hostapi.Usage{Name: "b", GPUNs: 999}); got != want {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}

func TestFormatGPUTime(t *testing.T) {
	tests := []struct {
		ns   uint64
		want string
	}{
		{0, "0.000000 s"},
		{999, "0.000000 s"},
		{1000, "0.000001 s"},
		{1234567000, "1.234567 s"},
		{1234567999, "1.234567 s"}, // truncated, never rounded up
		{3600e9, "3600.000000 s"},
		{^uint64(0), "18446744073.709551 s"},
	}
	for _, tt := range tests {
		if got := FormatGPUTime(tt.ns); got != tt.want {
			t.Errorf("FormatGPUTime(%d) = %q, want %q", tt.ns, got, tt.want)
		}
	}
}
