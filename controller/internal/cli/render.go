package cli

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// column is one column of a text table.
type column struct {
	title string
	right bool // numbers are right-aligned so that magnitudes line up
}

// renderTable lays rows out under cols, two spaces apart, without trailing
// blanks. Cells are assumed clean (see clean).
func renderTable(cols []column, rows [][]string) string {
	widths := make([]int, len(cols))
	for i, c := range cols {
		widths[i] = utf8.RuneCountInString(c.title)
	}
	for _, r := range rows {
		for i := range cols {
			widths[i] = max(widths[i], utf8.RuneCountInString(r[i]))
		}
	}
	var b strings.Builder
	line := func(cells func(int) string) {
		var l strings.Builder
		for i, c := range cols {
			s := cells(i)
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(s))
			if i > 0 {
				l.WriteString("  ")
			}
			if c.right {
				l.WriteString(pad + s)
			} else {
				l.WriteString(s + pad)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	line(func(i int) string { return cols[i].title })
	for _, r := range rows {
		line(func(i int) string { return r[i] })
	}
	return b.String()
}

// clean makes daemon-supplied text safe for a terminal: control characters
// (escape sequences included) become '?'.
func clean(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) && r != ' ' {
			return '?'
		}
		return r
	}, s)
}

// RenderVMTable renders VMs as the "vm list" table.
func RenderVMTable(vms []hostapi.VM) string {
	cols := []column{
		{title: "NAME"}, {title: "ID", right: true}, {title: "WEIGHT", right: true},
		{title: "CAP", right: true}, {title: "CHANNELS", right: true}, {title: "STATE"}, {title: "PEERS", right: true},
		{title: "ENDPOINT"},
	}
	rows := make([][]string, 0, len(vms))
	for _, vm := range vms {
		rows = append(rows, []string{
			clean(vm.Name), u64(uint64(vm.ID)), u64(uint64(vm.Weight)),
			capCell(vm.Cap), strconv.Itoa(vm.Channels), clean(vm.State), strconv.Itoa(vm.Peers),
			clean(vm.Endpoint),
		})
	}
	return renderTable(cols, rows)
}

// RenderVM renders one VM as "key: value" lines for "vm get".
func RenderVM(vm hostapi.VM) string {
	fields := [][2]string{
		{"Name", clean(vm.Name)},
		{"ID", u64(uint64(vm.ID))},
		{"Weight", u64(uint64(vm.Weight))},
		{"Cap", capField(vm.Cap)},
		{"State", clean(vm.State)},
		{"Peers", strconv.Itoa(vm.Peers)},
		{"Endpoint", clean(vm.Endpoint)},
	}
	if vm.Owner != "" {
		fields = append(fields, [2]string{"Owner", clean(vm.Owner) + " (and root, the daemon's user)"})
	}
	if r := vm.RefusedPeers; r != (hostapi.PeerRefusals{}) {
		fields = append(fields, [2]string{"Refused peers",
			fmt.Sprintf("%d foreign, %d no handshake, %d full, %d other", r.Foreign, r.NoHandshake, r.Full, r.Other)})
	}
	fields = append(fields, [][2]string{
		{"MSI vectors", strconv.Itoa(vm.Vectors)},
		{"Channels", strconv.Itoa(vm.Channels)},
		{"Ring entries", strconv.Itoa(vm.RingEntries)},
		{"Region size", sizeWithBytes(vm.RegionSize)},
		{"Heap size", sizeWithBytes(vm.HeapSize)},
		{"Memory", memoryField(vm.MemoryUsed, vm.Memory)},
		{"In flight", inflightField(vm)},
	}...)
	if vm.MaxCommandNs > 0 { // a daemon before the limit reports none
		fields = append(fields, [2]string{"Max command", maxCommandField(vm.MaxCommandNs, vm.Timeouts)})
	}
	fields = append(fields, [2]string{"Created", formatTime(vm.Created)})
	if vm.DoorbellsLimited > 0 {
		fields = append(fields, [2]string{"Doorbells limited", u64(vm.DoorbellsLimited)})
	}
	if vm.Volume != "" {
		fields = append(fields, [2]string{"Volume", clean(vm.Volume)})
	}
	if s := vm.Syscalls; s != nil {
		fields = append(fields,
			[2]string{"Syscall proxy", proxyField(s)},
			[2]string{"Syscalls", countsField(s.Calls)},
			[2]string{"Syscall errnos", countsField(s.Errnos)},
			[2]string{"Syscalls in flight", strconv.Itoa(s.InFlight)},
			[2]string{"Syscall batching", fmt.Sprintf("window %v, batch %d, %d batches, %d fastcalls", time.Duration(s.WindowNs), s.Batch, s.Batches, s.Fastcalls)},
			[2]string{"Syscall service", serviceField(s)},
		)
	}
	return renderFields(fields)
}

// serviceField is the host's share of the round trips: the mean and the
// longest time from a call seen READY to FINISHED written, and the mean scan.
func serviceField(s *hostapi.SyscallStats) string {
	if s.Served == 0 || s.ScanPasses == 0 {
		return "none yet"
	}
	out := fmt.Sprintf("mean %v, max %v over %d calls; scan %v a pass",
		time.Duration(s.ServiceNs/int64(s.Served)), time.Duration(s.ServiceMaxNs), s.Served,
		time.Duration(s.ScanNs/int64(s.ScanPasses)))
	if s.PollerBusyNs > 0 {
		out += fmt.Sprintf("; poller busy %v", time.Duration(s.PollerBusyNs).Round(time.Millisecond))
	}
	return out
}

func proxyField(s *hostapi.SyscallStats) string {
	out := clean(s.ProxyState)
	if s.ProxyPID != 0 {
		out += fmt.Sprintf(" (pid %d)", s.ProxyPID)
	}
	return out + fmt.Sprintf(", cpu %v, %d restarts", time.Duration(s.ProxyCPUNs).Round(time.Microsecond), s.ProxyRestarts)
}

// countsField renders name→count pairs sorted by name: "close 2, openat 3".
func countsField(m map[string]uint64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", clean(k), m[k])
	}
	return strings.Join(parts, ", ")
}

// FormatShare renders a share of the GPU (0..1) as a percentage with at
// most two decimals: 0.5 -> "50%", 1/3 -> "33.33%".
func FormatShare(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "?"
	}
	return strconv.FormatFloat(math.Round(f*1e4)/100, 'f', -1, 64) + "%"
}

// capCell is a VM's cap in a table: "-" for none.
func capCell(c float64) string {
	if c == 0 {
		return "-"
	}
	return FormatShare(c)
}

// capField is a VM's cap in "key: value" output.
func capField(c float64) string {
	if c == 0 {
		return "none"
	}
	return FormatShare(c) + " of the GPU (enforced under policy cap)"
}

// policyDescriptions say what each policy does, for humans.
var policyDescriptions = map[string]string{
	hostapi.PolicyNone:      "accounting only, no scheduling",
	hostapi.PolicyDFQ:       "disengaged fair queuing by weight",
	hostapi.PolicyCap:       "hard maximum shares; may idle the GPU",
	hostapi.PolicyTimeslice: "engaged round robin, a baseline",
}

// RenderPolicy renders the scheduling state for "policy get" and "policy set".
func RenderPolicy(p hostapi.PolicyState) string {
	policy := clean(p.Policy)
	if d, ok := policyDescriptions[p.Policy]; ok {
		policy += " (" + d + ")"
	}
	acct := clean(p.Accounting)
	if acct == "" {
		acct = "-"
	}
	return renderFields([][2]string{{"Policy", policy}, {"Accounting", acct}})
}

// RenderUsage renders a VM's usage for "vm usage".
func RenderUsage(u hostapi.Usage) string {
	return renderFields([][2]string{
		{"VM", clean(u.Name)},
		{"GPU time", fmt.Sprintf("%s (%d ns)", FormatGPUTime(u.GPUNs), u.GPUNs)},
		{"Kernels", u64(u.Kernels)},
		{"Commands", u64(u.Commands)},
		{"Errors", u64(u.Errors)},
		{"Since", formatTime(u.Since)},
	})
}

// FormatGPUTime renders nanoseconds as seconds with microsecond precision,
// truncated rather than rounded so that it never shows more than was used:
// 1234567890 -> "1.234567 s".
func FormatGPUTime(ns uint64) string {
	return fmt.Sprintf("%d.%06d s", ns/1e9, ns%1e9/1e3)
}

func renderFields(kv [][2]string) string {
	w := 0
	for _, f := range kv {
		w = max(w, len(f[0]))
	}
	var b strings.Builder
	for _, f := range kv {
		fmt.Fprintf(&b, "%-*s  %s\n", w+1, f[0]+":", f[1])
	}
	return b.String()
}

func sizeWithBytes(n uint64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%d bytes)", FormatSize(n), n)
}

// memoryField is a VM's device memory: what its buffers and modules hold
// and its quota.
func memoryField(used, quota uint64) string {
	switch {
	case quota == 0:
		return approxSize(used) + " used, no quota"
	case used > quota:
		return fmt.Sprintf("%s used, quota %s (over it: what takes more memory fails until the VM frees enough)", approxSize(used), FormatSize(quota))
	}
	return fmt.Sprintf("%s used, quota %s", approxSize(used), FormatSize(quota))
}

// memoryCell is memoryField for a table: USED or USED/QUOTA.
func memoryCell(used, quota uint64) string {
	if quota == 0 {
		return approxSize(used)
	}
	return approxSize(used) + "/" + FormatSize(quota)
}

// approxSize is n in the largest binary unit it reaches, to a tenth where
// it is not a whole number of them.
func approxSize(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for i < len(units)-1 && n>>(10*(i+1)) > 0 {
		i++
	}
	if n&(1<<(10*i)-1) == 0 {
		return fmt.Sprintf("%d %s", n>>(10*i), units[i])
	}
	return fmt.Sprintf("%.1f %s", float64(n)/float64(uint64(1)<<(10*i)), units[i])
}

// formatTime prints UTC so that output is the same wherever it is run.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func u64(n uint64) string { return strconv.FormatUint(n, 10) }
