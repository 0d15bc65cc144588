package apiserver

import (
	"fmt"
	"io"
	"sort"
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
		{"sluice_vm_timeouts_total", "Commands that ran past the VM's longest command; the backend ended its GPU work each time.", "counter",
			func(v hostapi.VMStats) string { return count(nonNegative(v.Timeouts)) }},
		{"sluice_vm_inflight_budget_seconds", "The VM's in-flight budget: estimated GPU time it may keep forwarded and not completed (0: no bound).", "gauge",
			func(v hostapi.VMStats) string { return seconds(nonNegative(v.InflightBudgetNs)) }},
		{"sluice_vm_inflight_seconds", "Estimated GPU time of the VM's commands forwarded and not completed.", "gauge",
			func(v hostapi.VMStats) string { return seconds(nonNegative(v.InflightNs)) }},
		{"sluice_vm_command_estimate_seconds", "What one of the VM's kernels or copies is costed at in its budget (0: none measured yet).", "gauge",
			func(v hostapi.VMStats) string { return seconds(nonNegative(v.EstimateNs)) }},
		{"sluice_vm_budget_stalls_total", "Times one of the VM's channels stopped forwarding for lack of room in its in-flight budget.", "counter",
			func(v hostapi.VMStats) string { return count(v.BudgetStalls) }},
	}
	for _, m := range metrics {
		header(w, m.name, m.help, m.typ)
		for _, v := range st.VMs {
			fmt.Fprintf(w, "%s{vm=\"%s\"} %s\n", m.name, escapeLabel(v.Name), m.val(v))
		}
	}
	writeSyscallMetrics(w, st.VMs)
	if st.Arbitration == "turns" {
		header(w, "sluice_vm_turn_holder", "1 while the VM holds the turn (arbitration turns: its work alone is on the GPU), else 0.", "gauge")
		for _, v := range st.VMs {
			fmt.Fprintf(w, "sluice_vm_turn_holder{vm=\"%s\"} %s\n", escapeLabel(v.Name), boolean(v.TurnHolder))
		}
		header(w, "sluice_turns_total", "Turns granted under arbitration turns since the daemon started.", "counter")
		fmt.Fprintf(w, "sluice_turns_total %d\n", st.Turns)
	}
	header(w, "sluice_poller_cpu_seconds_total", "CPU time the accounting poller used since the daemon started.", "counter")
	fmt.Fprintf(w, "sluice_poller_cpu_seconds_total %s\n", seconds(nonNegative(st.PollerCPUNs)))
}

// writeSyscallMetrics renders the VMs' GPU system calls: by call and by
// errno (labelled), in flight, and their proxy's CPU and restarts.
func writeSyscallMetrics(w io.Writer, vms []hostapi.VMStats) {
	labelled := []struct {
		name, help, label string
		m                 func(*hostapi.SyscallStats) map[string]uint64
	}{
		{"sluice_vm_syscalls_total", "GPU system calls taken, by call.", "call",
			func(s *hostapi.SyscallStats) map[string]uint64 { return s.Calls }},
		{"sluice_vm_syscall_results_total", "GPU system call results, by errno (OK for success).", "errno",
			func(s *hostapi.SyscallStats) map[string]uint64 { return s.Errnos }},
	}
	for _, m := range labelled {
		header(w, m.name, m.help, "counter")
		for _, v := range vms {
			if v.Syscalls == nil {
				continue
			}
			vals := m.m(v.Syscalls)
			keys := make([]string, 0, len(vals))
			for k := range vals {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(w, "%s{vm=\"%s\",%s=\"%s\"} %d\n", m.name, escapeLabel(v.Name), m.label, escapeLabel(k), vals[k])
			}
		}
	}
	plain := []struct {
		name, help, typ string
		val             func(*hostapi.SyscallStats) string
	}{
		{"sluice_vm_syscalls_in_flight", "GPU system calls with the VM's proxy now.", "gauge",
			func(s *hostapi.SyscallStats) string { return strconv.Itoa(s.InFlight) }},
		{"sluice_vm_syscall_proxy_cpu_seconds_total", "CPU time of the VM's running syscall proxy.", "counter",
			func(s *hostapi.SyscallStats) string { return seconds(nonNegative(s.ProxyCPUNs)) }},
		{"sluice_vm_syscall_proxy_restarts_total", "Times the VM's syscall proxy ended and was started again.", "counter",
			func(s *hostapi.SyscallStats) string { return count(s.ProxyRestarts) }},
	}
	for _, m := range plain {
		header(w, m.name, m.help, m.typ)
		for _, v := range vms {
			if v.Syscalls != nil {
				fmt.Fprintf(w, "%s{vm=\"%s\"} %s\n", m.name, escapeLabel(v.Name), m.val(v.Syscalls))
			}
		}
	}
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
