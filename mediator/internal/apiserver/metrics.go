package apiserver

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// writeMetrics renders Stats in the Prometheus text format: the per-VM
// families, each sample labelled with the VM, then the daemon-wide ones.
func writeMetrics(w io.Writer, st hostapi.Stats) {
	type metric struct {
		name, help, typ string
		val             func(hostapi.VMStats) string
	}
	metrics := []metric{
		{"sluice_vm_gpu_seconds_total", "GPU busy time of the VM's commands.", "counter",
			func(v hostapi.VMStats) string { return seconds(v.Usage.GPUNs) }},
		{"sluice_vm_kernels_total", "Kernels (THROTTLE, LAUNCH) completed.", "counter",
			func(v hostapi.VMStats) string { return count(v.Usage.Kernels) }},
		{"sluice_vm_commands_total", "Commands completed.", "counter",
			func(v hostapi.VMStats) string { return count(v.Usage.Commands) }},
		{"sluice_vm_errors_total", "Commands failed and records rejected.", "counter",
			func(v hostapi.VMStats) string { return count(v.Usage.Errors) }},
		{"sluice_vm_doorbells_total", "Doorbells received.", "counter",
			func(v hostapi.VMStats) string { return count(v.Doorbells) }},
		{"sluice_vm_peers", "Guest peers connected.", "gauge",
			func(v hostapi.VMStats) string { return strconv.Itoa(v.Peers) }},
		{"sluice_vm_accounted_seconds_total", "GPU time charged to the VM by accounting since the daemon started.", "counter",
			func(v hostapi.VMStats) string { return seconds(nonNegative(v.AccountedNs)) }},
		{"sluice_vm_held_seconds_total", "Time the scheduler held the VM's doorbells since the daemon started.", "counter",
			func(v hostapi.VMStats) string { return seconds(nonNegative(v.HeldNs)) }},
		{"sluice_vm_held", "1 while the scheduler holds the VM's doorbells, else 0.", "gauge",
			func(v hostapi.VMStats) string { return boolean(v.Held) }},
		{"sluice_vm_share", "The VM's share of the GPU in the last poll phase, 0 to 1.", "gauge",
			func(v hostapi.VMStats) string { return strconv.FormatFloat(v.Share, 'g', -1, 64) }},
	}
	for _, m := range metrics {
		header(w, m.name, m.help, m.typ)
		for _, v := range st.VMs {
			fmt.Fprintf(w, "%s{vm=\"%s\"} %s\n", m.name, escapeLabel(v.Name), m.val(v))
		}
	}
	header(w, "sluice_poller_cpu_seconds_total", "CPU time the accounting poller used since the daemon started.", "counter")
	fmt.Fprintf(w, "sluice_poller_cpu_seconds_total %s\n", seconds(nonNegative(st.PollerCPUNs)))
}

func header(w io.Writer, name, help, typ string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// seconds renders nanoseconds as seconds, exactly: the nanosecond digits
// are not rounded away as a float64 would past 2^53 ns (104 days).
func seconds(ns uint64) string { return fmt.Sprintf("%d.%09d", ns/1e9, ns%1e9) }

func count(n uint64) string { return strconv.FormatUint(n, 10) }

// nonNegative clamps a signed counter: a counter the daemon reports below
// zero would be a bug there, and Prometheus takes a negative counter for a
// reset.
func nonNegative(n int64) uint64 { return uint64(max(n, 0)) }

func boolean(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// labelEscaper escapes a label value as the text format wants: only
// backslash, double quote and newline. Go's %q is not that: it writes \t,
// \xFF and \u escapes that Prometheus rejects.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(s string) string { return labelEscaper.Replace(strings.ToValidUTF8(s, "\uFFFD")) }
