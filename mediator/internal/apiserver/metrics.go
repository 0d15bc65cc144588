package apiserver

import (
	"fmt"
	"io"
	"strings"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// writeMetrics renders Stats in the Prometheus text format.
func writeMetrics(w io.Writer, st hostapi.Stats) {
	type metric struct {
		name, help, typ string
		val             func(hostapi.VMStats) uint64
	}
	metrics := []metric{
		{"sluice_vm_gpu_seconds_total", "GPU busy time of the VM's commands.", "counter", nil},
		{"sluice_vm_kernels_total", "Kernels (THROTTLE, LAUNCH) completed.", "counter", func(v hostapi.VMStats) uint64 { return v.Usage.Kernels }},
		{"sluice_vm_commands_total", "Commands completed.", "counter", func(v hostapi.VMStats) uint64 { return v.Usage.Commands }},
		{"sluice_vm_errors_total", "Commands failed and records rejected.", "counter", func(v hostapi.VMStats) uint64 { return v.Usage.Errors }},
		{"sluice_vm_doorbells_total", "Doorbells received.", "counter", func(v hostapi.VMStats) uint64 { return v.Doorbells }},
		{"sluice_vm_peers", "Guest peers connected.", "gauge", func(v hostapi.VMStats) uint64 { return uint64(v.Peers) }},
	}
	for _, m := range metrics {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.typ)
		for _, v := range st.VMs {
			if m.val == nil {
				fmt.Fprintf(w, "%s{vm=\"%s\"} %.9f\n", m.name, escapeLabel(v.Name), float64(v.Usage.GPUNs)/1e9)
				continue
			}
			fmt.Fprintf(w, "%s{vm=\"%s\"} %d\n", m.name, escapeLabel(v.Name), m.val(v))
		}
	}
}

// labelEscaper escapes a label value as the text format wants: only
// backslash, double quote and newline. Go's %q is not that: it writes \t,
// \xFF and \u escapes that Prometheus rejects.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(s string) string { return labelEscaper.Replace(strings.ToValidUTF8(s, "\uFFFD")) }
