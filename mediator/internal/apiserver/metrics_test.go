package apiserver

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// promFamily is one metric family as read back from the text format.
type promFamily struct {
	help, typ string
	samples   map[string]string // vm label value -> sample value; "" for a sample without labels
}

var (
	promSample = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{vm="((?:[^"\\\n]|\\[\\"n])*)"\})? (\S+)$`)
	promMeta   = regexp.MustCompile(`^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$`)
	promUnesc  = strings.NewReplacer(`\\`, `\`, `\"`, `"`, `\n`, "\n")
)

// parseProm reads the subset of the Prometheus text format the server
// writes, strictly: HELP, then TYPE, then the family's samples, each family
// once, every line one of those.
func parseProm(t *testing.T, text string) (map[string]*promFamily, []string) {
	t.Helper()
	fams := map[string]*promFamily{}
	var order []string
	if text != "" && !strings.HasSuffix(text, "\n") {
		t.Errorf("output does not end in a newline")
	}
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if !utf8.ValidString(line) {
			t.Errorf("line %d is not UTF-8: %q", i+1, line)
		}
		if m := promMeta.FindStringSubmatch(line); m != nil {
			f := fams[m[2]]
			switch {
			case m[1] == "HELP" && f == nil:
				fams[m[2]] = &promFamily{help: m[3], samples: map[string]string{}}
				order = append(order, m[2])
			case m[1] == "TYPE" && f != nil && f.typ == "" && len(f.samples) == 0:
				f.typ = m[3]
			default:
				t.Errorf("line %d: %s out of order: %q", i+1, m[1], line)
			}
			continue
		}
		m := promSample.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("line %d is not in the text format: %q", i+1, line)
			continue
		}
		f := fams[m[1]]
		if f == nil || f.typ == "" || order[len(order)-1] != m[1] {
			t.Errorf("line %d: sample outside its family: %q", i+1, line)
			continue
		}
		vm := promUnesc.Replace(m[2])
		if _, dup := f.samples[vm]; dup {
			t.Errorf("line %d: second sample for vm %q", i+1, vm)
		}
		f.samples[vm] = m[3]
	}
	return fams, order
}

func TestMetrics(t *testing.T) {
	st := sampleStats()
	weird := hostapi.VMStats{
		VM:          hostapi.VM{Name: "we\"ird\\vm\nwith\ttab and \u00e9", Peers: 3},
		Usage:       hostapi.Usage{GPUNs: 7, Kernels: 1 << 63, Commands: 1<<64 - 1},
		AccountedNs: -5, HeldNs: 1<<63 - 1, Share: 1.0 / 3,
	}
	st.VMs = append(st.VMs, weird, hostapi.VMStats{VM: hostapi.VM{Name: "bad\xffutf8"}})
	f := newFake()
	f.stats = st
	w := do(t, Handler(f), "GET", "/metrics", "")
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "text/plain; version=0.0.4" {
		t.Errorf("Content-Type %q", ct)
	}
	fams, order := parseProm(t, w.Body.String())
	want := []struct{ name, typ string }{
		{"sluice_vm_gpu_seconds_total", "counter"},
		{"sluice_vm_kernels_total", "counter"},
		{"sluice_vm_commands_total", "counter"},
		{"sluice_vm_errors_total", "counter"},
		{"sluice_vm_doorbells_total", "counter"},
		{"sluice_vm_peers", "gauge"},
		{"sluice_vm_accounted_seconds_total", "counter"},
		{"sluice_vm_held_seconds_total", "counter"},
		{"sluice_vm_held", "gauge"},
		{"sluice_vm_share", "gauge"},
		{"sluice_vm_timeouts_total", "counter"},
		{"sluice_vm_inflight_budget_seconds", "gauge"},
		{"sluice_vm_inflight_seconds", "gauge"},
		{"sluice_vm_command_estimate_seconds", "gauge"},
		{"sluice_vm_budget_stalls_total", "counter"},
		{"sluice_vm_syscalls_total", "counter"},
		{"sluice_vm_syscall_results_total", "counter"},
		{"sluice_vm_syscalls_in_flight", "gauge"},
		{"sluice_vm_syscall_proxy_cpu_seconds_total", "counter"},
		{"sluice_vm_syscall_proxy_restarts_total", "counter"},
		{"sluice_poller_cpu_seconds_total", "counter"},
	}
	var names []string
	for _, m := range want {
		names = append(names, m.name)
		if fam := fams[m.name]; fam == nil || fam.typ != m.typ || fam.help == "" {
			t.Errorf("family %s: %+v, want type %s and help", m.name, fam, m.typ)
		}
	}
	if !slices.Equal(order, names) {
		t.Fatalf("families %q, want %q", order, names)
	}
	const bad = "bad\uFFFDutf8" // invalid UTF-8 is replaced, the output stays valid
	for _, tc := range []struct{ family, vm, value string }{
		{"sluice_vm_gpu_seconds_total", "busy", "1.500000000"},
		{"sluice_vm_gpu_seconds_total", weird.Name, "0.000000007"},
		{"sluice_vm_gpu_seconds_total", bad, "0.000000000"},
		{"sluice_vm_kernels_total", "busy", "3"},
		{"sluice_vm_kernels_total", weird.Name, "9223372036854775808"},
		{"sluice_vm_commands_total", "busy", "10"},
		{"sluice_vm_commands_total", weird.Name, "18446744073709551615"},
		{"sluice_vm_errors_total", "busy", "1"},
		{"sluice_vm_doorbells_total", "busy", "42"},
		{"sluice_vm_peers", "busy", "1"},
		{"sluice_vm_peers", weird.Name, "3"},
		{"sluice_vm_peers", bad, "0"},
		{"sluice_vm_accounted_seconds_total", "busy", "1.400000000"},
		{"sluice_vm_accounted_seconds_total", weird.Name, "0.000000000"}, // a negative counter is clamped
		{"sluice_vm_held_seconds_total", "busy", "2.500000001"},
		{"sluice_vm_held_seconds_total", weird.Name, "9223372036.854775807"}, // exact, no float rounding
		{"sluice_vm_held", "busy", "1"},
		{"sluice_vm_held", weird.Name, "0"},
		{"sluice_vm_share", "busy", "0.625"},
		{"sluice_vm_share", weird.Name, "0.3333333333333333"},
		{"sluice_vm_share", bad, "0"},
		{"sluice_vm_timeouts_total", "busy", "2"},
		{"sluice_vm_timeouts_total", weird.Name, "0"},
		{"sluice_vm_inflight_budget_seconds", "busy", "0.003250000"},
		{"sluice_vm_inflight_budget_seconds", bad, "0.000000000"},
		{"sluice_vm_inflight_seconds", "busy", "0.002000001"},
		{"sluice_vm_command_estimate_seconds", "busy", "0.000100000"},
		{"sluice_vm_budget_stalls_total", "busy", "17"},
		{"sluice_vm_budget_stalls_total", weird.Name, "0"},
		{"sluice_poller_cpu_seconds_total", "", "12.345678901"},
	} {
		if got := fams[tc.family].samples[tc.vm]; got != tc.value {
			t.Errorf("%s{vm=%q} = %q, want %q", tc.family, tc.vm, got, tc.value)
		}
	}
	for _, name := range names {
		want := len(st.VMs)
		switch {
		case strings.HasPrefix(name, "sluice_vm_syscall"):
			want = 0 // these VMs serve no system calls: TestSyscallMetrics
		case !strings.HasPrefix(name, "sluice_vm_"):
			want = 1 // daemon-wide, one sample without labels
		}
		if n := len(fams[name].samples); n != want {
			t.Errorf("%s has %d samples, want %d", name, n, want)
		}
	}
	// What the escaping must look like on the wire, not just read back.
	if wire := `{vm="we\"ird\\vm\nwith` + "\t" + `tab and ` + "\u00e9" + `"}`; !strings.Contains(w.Body.String(), wire) {
		t.Errorf("output lacks %s:\n%s", wire, w.Body)
	}
}

func TestMetricsNoVMs(t *testing.T) {
	var b bytes.Buffer
	writeMetrics(&b, hostapi.Stats{})
	fams, order := parseProm(t, b.String())
	if len(order) != 21 {
		t.Errorf("families %q, want all twenty-one with HELP and TYPE", order)
	}
	for name, f := range fams {
		if name == "sluice_poller_cpu_seconds_total" {
			if f.samples[""] != "0.000000000" || len(f.samples) != 1 {
				t.Errorf("%s: %v, want one sample 0", name, f.samples)
			}
			continue
		}
		if len(f.samples) != 0 {
			t.Errorf("%s has samples without vms", name)
		}
	}
}

func TestEscapeLabel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{`a"b`, `a\"b`},
		{`a\b`, `a\\b`},
		{"a\nb", `a\nb`},
		{`\"`, `\\\"`},
		{"\t\u00e9", "\t\u00e9"},
		{"\xff", "\uFFFD"},
	} {
		if got := escapeLabel(tc.in); got != tc.want {
			t.Errorf("escapeLabel(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzEscapeLabel(f *testing.F) {
	for _, s := range []string{"a", `"\`, "\n\r\t", "\xff\xfe", `\n`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := escapeLabel(s)
		line := fmt.Sprintf("m{vm=\"%s\"} 1", got)
		m := promSample.FindStringSubmatch(line)
		if m == nil || !utf8.ValidString(line) {
			t.Fatalf("escapeLabel(%q) = %q: not a valid label value", s, got)
		}
		if back := promUnesc.Replace(m[2]); back != strings.ToValidUTF8(s, "\uFFFD") {
			t.Fatalf("escapeLabel(%q) reads back as %q", s, back)
		}
	})
}

func TestSyscallMetrics(t *testing.T) {
	st := hostapi.Stats{VMs: []hostapi.VMStats{
		{VM: hostapi.VM{Name: "gpu", Syscalls: &hostapi.SyscallStats{
			Calls: map[string]uint64{"openat": 3, "null": 10}, Errnos: map[string]uint64{"OK": 12, "ENOENT": 1},
			InFlight: 2, ProxyCPUNs: 1500000000, ProxyRestarts: 1,
		}}},
		{VM: hostapi.VM{Name: "none"}},
	}}
	f := newFake()
	f.stats = st
	body := do(t, Handler(f), "GET", "/metrics", "").Body.String()
	for _, want := range []string{
		`sluice_vm_syscalls_total{vm="gpu",call="null"} 10`,
		`sluice_vm_syscalls_total{vm="gpu",call="openat"} 3`,
		`sluice_vm_syscall_results_total{vm="gpu",errno="ENOENT"} 1`,
		`sluice_vm_syscalls_in_flight{vm="gpu"} 2`,
		`sluice_vm_syscall_proxy_cpu_seconds_total{vm="gpu"} 1.500000000`,
		`sluice_vm_syscall_proxy_restarts_total{vm="gpu"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("no line %q in\n%s", want, body)
		}
	}
	if strings.Contains(body, `syscalls_in_flight{vm="none"}`) {
		t.Error("a VM without syscalls has syscall samples")
	}
}
