package hostmetrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// existing are the families sluiced served before the client library, by
// name and type: dashboards and tests use them, so none may go.
var existing = map[string]dto.MetricType{
	"sluice_vm_gpu_seconds_total":               dto.MetricType_COUNTER,
	"sluice_vm_kernels_total":                   dto.MetricType_COUNTER,
	"sluice_vm_commands_total":                  dto.MetricType_COUNTER,
	"sluice_vm_errors_total":                    dto.MetricType_COUNTER,
	"sluice_vm_doorbells_total":                 dto.MetricType_COUNTER,
	"sluice_vm_peers":                           dto.MetricType_GAUGE,
	"sluice_vm_accounted_seconds_total":         dto.MetricType_COUNTER,
	"sluice_vm_held_seconds_total":              dto.MetricType_COUNTER,
	"sluice_vm_held":                            dto.MetricType_GAUGE,
	"sluice_vm_share":                           dto.MetricType_GAUGE,
	"sluice_vm_timeouts_total":                  dto.MetricType_COUNTER,
	"sluice_vm_inflight_budget_seconds":         dto.MetricType_GAUGE,
	"sluice_vm_inflight_seconds":                dto.MetricType_GAUGE,
	"sluice_vm_command_estimate_seconds":        dto.MetricType_GAUGE,
	"sluice_vm_budget_stalls_total":             dto.MetricType_COUNTER,
	"sluice_vm_syscalls_total":                  dto.MetricType_COUNTER,
	"sluice_vm_syscall_results_total":           dto.MetricType_COUNTER,
	"sluice_vm_syscalls_in_flight":              dto.MetricType_GAUGE,
	"sluice_vm_syscall_proxy_cpu_seconds_total": dto.MetricType_COUNTER,
	"sluice_vm_syscall_proxy_restarts_total":    dto.MetricType_COUNTER,
	"sluice_vm_turn_holder":                     dto.MetricType_GAUGE,
	"sluice_turns_total":                        dto.MetricType_COUNTER,
	"sluice_arbitration_switches_total":         dto.MetricType_COUNTER,
	"sluice_poller_cpu_seconds_total":           dto.MetricType_COUNTER,
}

// Full is a snapshot in which every family has samples: two VMs, one
// serving system calls, under arbitration turns.
func Full() hostapi.Stats {
	return hostapi.Stats{Backend: "sim", Clock: "wall", Policy: hostapi.PolicyDFQ, Accounting: "loga",
		Arbitration: "turns", Turns: 9, ArbitrationAuto: true, ArbitrationSwitches: 5, PollerCPUNs: 12_345_678_901, Periods: 77,
		VMs: []hostapi.VMStats{
			{VM: hostapi.VM{Name: "busy", Weight: 2, Cap: 0.5, Peers: 1, Timeouts: 2,
				RefusedPeers:     hostapi.PeerRefusals{Foreign: 5, NoHandshake: 4, Full: 3, Other: 1},
				InflightBudgetNs: 3_250_000, InflightNs: 2_000_001, EstimateNs: 100_000, BudgetStalls: 17,
				Syscalls: &hostapi.SyscallStats{Calls: map[string]uint64{"openat": 3, "null": 10},
					Errnos: map[string]uint64{"OK": 12, "ENOENT": 1}, InFlight: 2, ProxyCPUNs: 1_500_000_000,
					ProxyRestarts: 1, Served: 4, ServiceNs: 2_000, PollerBusyNs: 3_000_000_000}},
				Usage:       hostapi.Usage{GPUNs: 1_500_000_000, Kernels: 3, Commands: 10, Errors: 1},
				Doorbells:   42,
				AccountedNs: 1_400_000_000, Share: 0.625, Held: true, HeldNs: 2_500_000_001, TurnHolder: true},
			{VM: hostapi.VM{Name: "we\"ird\\vm\nwith\ttab and \u00e9", Weight: 1, Peers: 3, Timeouts: -1},
				Usage:       hostapi.Usage{GPUNs: 7, Kernels: 1 << 63, Commands: 1<<64 - 1},
				AccountedNs: -5, HeldNs: 1<<63 - 1, Share: 1.0 / 3},
			{VM: hostapi.VM{Name: "bad\xffutf8"}},
		}}
}

func gather(t *testing.T, st hostapi.Stats, err error) map[string]*dto.MetricFamily {
	t.Helper()
	reg := NewRegistry(func(context.Context) (hostapi.Stats, error) { return st, err })
	fams, gerr := reg.Gather()
	if gerr != nil {
		t.Fatal(gerr)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// value is the sample of family name whose labels are labels (name=value
// pairs, sorted by name as the library sorts them); NaN if there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return math.NaN()
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel())*2 != len(labels) {
			continue
		}
		for i, l := range m.GetLabel() {
			if l.GetName() != labels[2*i] || l.GetValue() != labels[2*i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		}
	}
	return math.NaN()
}

// TestEveryFamily: with Full, every described family has samples, every
// existing one is there with its type, and help is never empty.
func TestEveryFamily(t *testing.T) {
	fams := gather(t, Full(), nil)
	for name, typ := range existing {
		if f := fams[name]; f == nil || f.GetType() != typ {
			t.Errorf("family %s: %v, want type %v", name, f, typ)
		}
	}
	ch := make(chan *prometheus.Desc, 100)
	NewCollector(nil).Describe(ch)
	close(ch)
	n := 0
	for range ch {
		n++
	}
	var ours []string
	for name, f := range fams {
		if strings.HasPrefix(name, "sluice_") {
			ours = append(ours, name)
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
	}
	if len(ours) != n {
		t.Errorf("%d sluice families gathered (%q), %d described", len(ours), ours, n)
	}
}

func TestValues(t *testing.T) {
	fams := gather(t, Full(), nil)
	weird := Full().VMs[1].Name
	const bad = "bad\uFFFDutf8" // invalid UTF-8 is replaced
	for _, tc := range []struct {
		family, vm string
		want       float64
	}{
		{"sluice_vm_gpu_seconds_total", "busy", 1.5},
		{"sluice_vm_gpu_seconds_total", weird, 7e-9},
		{"sluice_vm_gpu_seconds_total", bad, 0},
		{"sluice_vm_kernels_total", weird, 1 << 63},
		{"sluice_vm_commands_total", weird, 1<<64 - 1},
		{"sluice_vm_errors_total", "busy", 1},
		{"sluice_vm_doorbells_total", "busy", 42},
		{"sluice_vm_peers", weird, 3},
		{"sluice_vm_accounted_seconds_total", "busy", 1.4},
		{"sluice_vm_accounted_seconds_total", weird, 0}, // a negative counter is clamped
		{"sluice_vm_held_seconds_total", "busy", 2.500000001},
		{"sluice_vm_held", "busy", 1},
		{"sluice_vm_held", weird, 0},
		{"sluice_vm_share", weird, 1.0 / 3},
		{"sluice_vm_timeouts_total", "busy", 2},
		{"sluice_vm_timeouts_total", weird, 0},
		{"sluice_vm_inflight_budget_seconds", "busy", 0.00325},
		{"sluice_vm_inflight_seconds", "busy", 0.002000001},
		{"sluice_vm_command_estimate_seconds", "busy", 0.0001},
		{"sluice_vm_budget_stalls_total", "busy", 17},
		{"sluice_vm_weight", "busy", 2},
		{"sluice_vm_cap", "busy", 0.5},
		{"sluice_vm_turn_holder", "busy", 1},
		{"sluice_vm_turn_holder", weird, 0},
		{"sluice_vm_syscalls_in_flight", "busy", 2},
		{"sluice_vm_syscall_proxy_cpu_seconds_total", "busy", 1.5},
		{"sluice_vm_syscall_proxy_restarts_total", "busy", 1},
		{"sluice_vm_syscalls_served_total", "busy", 4},
		{"sluice_vm_syscall_service_seconds_total", "busy", 2e-6},
		{"sluice_vm_syscall_poller_busy_seconds_total", "busy", 3},
	} {
		if got := value(fams, tc.family, "vm", tc.vm); got != tc.want {
			t.Errorf("%s{vm=%q} = %v, want %v", tc.family, tc.vm, got, tc.want)
		}
	}
	for _, tc := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"sluice_vm_syscalls_total", []string{"call", "null", "vm", "busy"}, 10},
		{"sluice_vm_syscalls_total", []string{"call", "openat", "vm", "busy"}, 3},
		{"sluice_vm_syscall_results_total", []string{"errno", "ENOENT", "vm", "busy"}, 1},
		{"sluice_vm_peers_refused_total", []string{"reason", "foreign", "vm", "busy"}, 5},
		{"sluice_vm_peers_refused_total", []string{"reason", "no_handshake", "vm", "busy"}, 4},
		{"sluice_vm_peers_refused_total", []string{"reason", "full", "vm", "busy"}, 3},
		{"sluice_vm_peers_refused_total", []string{"reason", "other", "vm", "busy"}, 1},
		{"sluice_turns_total", nil, 9},
		{"sluice_arbitration_switches_total", nil, 5},
		{"sluice_poller_cpu_seconds_total", nil, 12.345678901},
		{"sluice_scheduling_periods_total", nil, 77},
		{"sluice_vms", nil, 3},
		{"sluice_daemon_info", []string{"accounting", "loga", "arbitration", "turns", "backend", "sim", "clock", "wall", "policy", "dfq"}, 1},
	} {
		if got := value(fams, tc.family, tc.labels...); got != tc.want {
			t.Errorf("%s%q = %v, want %v", tc.family, tc.labels, got, tc.want)
		}
	}
	// VMs without a syscall endpoint have no syscall samples.
	if n := len(fams["sluice_vm_syscalls_in_flight"].GetMetric()); n != 1 {
		t.Errorf("sluice_vm_syscalls_in_flight has %d samples, want busy's only", n)
	}
}

// TestNoVMs: the daemon-wide families are there, the per-VM ones and the
// turns (arbitration driver) are not, and the info says driver.
func TestNoVMs(t *testing.T) {
	fams := gather(t, hostapi.Stats{}, nil)
	var names []string
	for name := range fams {
		if strings.HasPrefix(name, "sluice_") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	want := []string{"sluice_daemon_info", "sluice_poller_cpu_seconds_total", "sluice_scheduling_periods_total", "sluice_vms"}
	if !slices.Equal(names, want) {
		t.Errorf("families %q, want %q", names, want)
	}
	if got := value(fams, "sluice_daemon_info", "accounting", "", "arbitration", "driver", "backend", "", "clock", "", "policy", ""); got != 1 {
		t.Errorf("sluice_daemon_info without arbitration: %v", got)
	}
}

// TestHandler: the text format by default, labels escaped as the format
// wants, and a failed snapshot is answered by fail alone.
func TestHandler(t *testing.T) {
	st := Full()
	fail := func(w http.ResponseWriter, err error) { http.Error(w, "failed: "+err.Error(), http.StatusTeapot) }
	h := Handler(func(context.Context) (hostapi.Stats, error) { return st, nil }, fail)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("status %d, Content-Type %q", w.Code, w.Header().Get("Content-Type"))
	}
	body := w.Body.String()
	if wire := `{vm="we\"ird\\vm\nwith` + "\t" + `tab and ` + "\u00e9" + `"}`; !strings.Contains(body, wire) {
		t.Errorf("output lacks %s", wire)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing the output: %v", err)
	}
	if got := value(fams, "sluice_vm_doorbells_total", "vm", "busy"); got != 42 {
		t.Errorf("sluice_vm_doorbells_total{vm=busy} read back as %v", got)
	}

	failing := Handler(func(context.Context) (hostapi.Stats, error) { return hostapi.Stats{}, errors.New("disk on fire") }, fail)
	w = httptest.NewRecorder()
	failing.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusTeapot || w.Body.String() != "failed: disk on fire\n" {
		t.Errorf("failing snapshot: %d %s", w.Code, w.Body)
	}
}

// TestOneSnapshotPerScrape: a scrape reads the daemon's stats once,
// whatever the number of families.
func TestOneSnapshotPerScrape(t *testing.T) {
	calls := 0
	h := Handler(func(context.Context) (hostapi.Stats, error) { calls++; return Full(), nil }, nil)
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("status %d", w.Code)
		}
	}
	if calls != 2 {
		t.Errorf("%d snapshots for two scrapes", calls)
	}
}

// TestHistograms: a VM's dispatch and turnaround distributions are
// Prometheus histograms of seconds with cumulative buckets.
func TestHistograms(t *testing.T) {
	st := Full()
	st.VMs[0].Turnaround = hostapi.Histogram{BoundsNs: []int64{1000, 2000, 4000}, Counts: []uint64{1, 0, 2, 5}, SumNs: 9_000_000_000, Count: 8}
	fams := gather(t, st, nil)
	f := fams["sluice_vm_turnaround_seconds"]
	if f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("sluice_vm_turnaround_seconds: %v", f)
	}
	for _, m := range f.GetMetric() {
		if m.GetLabel()[0].GetValue() != "busy" {
			continue
		}
		h := m.GetHistogram()
		var got []string
		for _, b := range h.GetBucket() {
			got = append(got, fmt.Sprintf("%g:%d", b.GetUpperBound(), b.GetCumulativeCount()))
		}
		if want := "1e-06:1 2e-06:1 4e-06:3"; strings.Join(got, " ") != want || h.GetSampleCount() != 8 || h.GetSampleSum() != 9 {
			t.Fatalf("busy's turnaround: buckets %v count %d sum %v; want %s, 8, 9", got, h.GetSampleCount(), h.GetSampleSum(), want)
		}
		return
	}
	t.Fatal("no turnaround histogram for busy")
}
