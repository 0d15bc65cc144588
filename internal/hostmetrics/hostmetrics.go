// Package hostmetrics is sluiced's Prometheus metrics, through the
// Prometheus client library: a collector that takes one hostapi.Stats
// snapshot per scrape and turns it into per-VM and daemon-wide samples.
//
// A scrape costs what GET /v1/stats costs: the daemon's control mutex for
// the copy of its counters, never the data path (doorbells, rings, the
// backend). Nothing is kept between scrapes. The daemon measures sums and
// counts, and two distributions per VM as histograms: a record's doorbell to
// its forwarding (sluice_vm_dispatch_seconds) and to its completion
// (sluice_vm_turnaround_seconds). Other means are a rate of a sum over a rate
// of a count (sluice_vm_syscall_service_seconds_total over
// sluice_vm_syscalls_served_total).
//
// It lives outside mediator/ so that the Grafana dashboard's test
// (deploy/grafana) can read the names from the real registry.
package hostmetrics

import (
	"context"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// StatsFunc is the daemon's snapshot (daemon.Daemon.Stats).
type StatsFunc func(context.Context) (hostapi.Stats, error)

// vmMetric is a family with one sample per VM, labelled vm.
type vmMetric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	val  func(hostapi.VMStats) float64
}

func vm(name, help string, typ prometheus.ValueType, val func(hostapi.VMStats) float64) vmMetric {
	return vmMetric{prometheus.NewDesc(name, help, []string{"vm"}, nil), typ, val}
}

// syscallMetric is a family with one sample per VM that serves GPU system
// calls; the VMs without a syscall endpoint have none.
type syscallMetric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	val  func(*hostapi.SyscallStats) float64
}

func sys(name, help string, typ prometheus.ValueType, val func(*hostapi.SyscallStats) float64) syscallMetric {
	return syscallMetric{prometheus.NewDesc(name, help, []string{"vm"}, nil), typ, val}
}

// labelledMetric is a syscall family with a second label (call, errno).
type labelledMetric struct {
	desc *prometheus.Desc
	vals func(*hostapi.SyscallStats) map[string]uint64
}

const (
	counter = prometheus.CounterValue
	gauge   = prometheus.GaugeValue
)

// seconds converts nanoseconds; a negative count, which would be a bug in
// the daemon, is clamped to 0 (Prometheus takes a counter going below its
// last value for a reset).
func seconds(ns int64) float64 { return float64(max(ns, 0)) / 1e9 }

func boolean(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var (
	vmMetrics = []vmMetric{
		vm("sluice_vm_gpu_seconds_total", "GPU busy time of the VM's commands.", counter,
			func(v hostapi.VMStats) float64 { return float64(v.Usage.GPUNs) / 1e9 }),
		vm("sluice_vm_kernels_total", "Kernels (THROTTLE, LAUNCH) completed.", counter,
			func(v hostapi.VMStats) float64 { return float64(v.Usage.Kernels) }),
		vm("sluice_vm_commands_total", "Commands completed.", counter,
			func(v hostapi.VMStats) float64 { return float64(v.Usage.Commands) }),
		vm("sluice_vm_errors_total", "Commands failed and records rejected.", counter,
			func(v hostapi.VMStats) float64 { return float64(v.Usage.Errors) }),
		vm("sluice_vm_doorbells_total", "Doorbells received.", counter,
			func(v hostapi.VMStats) float64 { return float64(v.Doorbells) }),
		vm("sluice_vm_doorbells_limited_total", "Doorbells rung while the vector was muted for ringing over the doorbell limit.", counter,
			func(v hostapi.VMStats) float64 { return float64(v.DoorbellsLimited) }),
		vm("sluice_vm_wakes_total", "Signals sent to the VM's guests asleep on a channel's wake word.", counter,
			func(v hostapi.VMStats) float64 { return float64(v.Wakes) }),
		vm("sluice_vm_peers", "Guest peers connected.", gauge,
			func(v hostapi.VMStats) float64 { return float64(v.Peers) }),
		vm("sluice_vm_accounted_seconds_total", "GPU time charged to the VM by accounting since the daemon started.", counter,
			func(v hostapi.VMStats) float64 { return seconds(v.AccountedNs) }),
		vm("sluice_vm_held_seconds_total", "Time the scheduler held the VM's doorbells since the daemon started.", counter,
			func(v hostapi.VMStats) float64 { return seconds(v.HeldNs) }),
		vm("sluice_vm_held", "1 while the scheduler holds the VM's doorbells, else 0.", gauge,
			func(v hostapi.VMStats) float64 { return boolean(v.Held) }),
		vm("sluice_vm_share", "The VM's share of the GPU in the last poll phase, 0 to 1.", gauge,
			func(v hostapi.VMStats) float64 { return v.Share }),
		vm("sluice_vm_timeouts_total", "Commands that ran past the VM's longest command; the backend ended its GPU work each time.", counter,
			func(v hostapi.VMStats) float64 { return float64(max(v.Timeouts, 0)) }),
		vm("sluice_vm_inflight_budget_seconds", "The VM's in-flight budget: estimated GPU time it may keep forwarded and not completed (0: no bound).", gauge,
			func(v hostapi.VMStats) float64 { return seconds(v.InflightBudgetNs) }),
		vm("sluice_vm_inflight_seconds", "Estimated GPU time of the VM's commands forwarded and not completed.", gauge,
			func(v hostapi.VMStats) float64 { return seconds(v.InflightNs) }),
		vm("sluice_vm_command_estimate_seconds", "What one of the VM's kernels or copies is costed at in its budget (0: none measured yet).", gauge,
			func(v hostapi.VMStats) float64 { return seconds(v.EstimateNs) }),
		vm("sluice_vm_budget_stalls_total", "Times one of the VM's channels stopped forwarding for lack of room in its in-flight budget.", counter,
			func(v hostapi.VMStats) float64 { return float64(v.BudgetStalls) }),
		vm("sluice_vm_weight", "The VM's scheduling weight.", gauge,
			func(v hostapi.VMStats) float64 { return float64(v.Weight) }),
		vm("sluice_vm_cap", "The VM's cap on its share of the GPU, 0 to 1 (0: none).", gauge,
			func(v hostapi.VMStats) float64 { return v.Cap }),
	}
	syscallLabelled = []labelledMetric{
		{prometheus.NewDesc("sluice_vm_syscalls_total", "GPU system calls taken, by call.", []string{"vm", "call"}, nil),
			func(s *hostapi.SyscallStats) map[string]uint64 { return s.Calls }},
		{prometheus.NewDesc("sluice_vm_syscall_results_total", "GPU system call results, by errno (OK for success).", []string{"vm", "errno"}, nil),
			func(s *hostapi.SyscallStats) map[string]uint64 { return s.Errnos }},
	}
	syscallMetrics = []syscallMetric{
		sys("sluice_vm_syscalls_in_flight", "GPU system calls with the VM's proxy now.", gauge,
			func(s *hostapi.SyscallStats) float64 { return float64(s.InFlight) }),
		sys("sluice_vm_syscall_proxy_cpu_seconds_total", "CPU time of the VM's running syscall proxy.", counter,
			func(s *hostapi.SyscallStats) float64 { return seconds(s.ProxyCPUNs) }),
		sys("sluice_vm_syscall_proxy_restarts_total", "Times the VM's syscall proxy ended and was started again.", counter,
			func(s *hostapi.SyscallStats) float64 { return float64(s.ProxyRestarts) }),
		sys("sluice_vm_syscalls_served_total", "Blocking GPU system calls finished, each timed from the poller's scan that saw it ready to its result written.", counter,
			func(s *hostapi.SyscallStats) float64 { return float64(s.Served) }),
		sys("sluice_vm_syscall_service_seconds_total", "Host-side time of the blocking GPU system calls finished (ready seen to result written), summed; over sluice_vm_syscalls_served_total it is the mean.", counter,
			func(s *hostapi.SyscallStats) float64 { return seconds(s.ServiceNs) }),
		sys("sluice_vm_syscall_poller_busy_seconds_total", "Time the VM's syscall poller was awake (spinning or working): the host CPU it held.", counter,
			func(s *hostapi.SyscallStats) float64 { return seconds(s.PollerBusyNs) }),
	}
	peersRefused = prometheus.NewDesc("sluice_vm_peers_refused_total",
		"Connections to the VM's endpoint closed before they joined, by reason: foreign (a user that may not open it), no_handshake (did not read its handshake in time), full (every peer slot held), other.",
		[]string{"vm", "reason"}, nil)
	turnHolder = prometheus.NewDesc("sluice_vm_turn_holder",
		"1 while the VM holds the turn (arbitration turns: its work alone is on the GPU), else 0.", []string{"vm"}, nil)
	turns    = prometheus.NewDesc("sluice_turns_total", "Turns granted under arbitration turns since the daemon started.", nil, nil)
	switches = prometheus.NewDesc("sluice_arbitration_switches_total",
		"Under arbitration auto, switches between driver and turns since the daemon started (the info's arbitration label is the one in force).", nil, nil)

	pollerCPU = prometheus.NewDesc("sluice_poller_cpu_seconds_total", "CPU time the accounting poller used since the daemon started.", nil, nil)
	periods   = prometheus.NewDesc("sluice_scheduling_periods_total", "Scheduling periods ended since the daemon started.", nil, nil)
	vms       = prometheus.NewDesc("sluice_vms", "VMs the daemon serves.", nil, nil)
	info      = prometheus.NewDesc("sluice_daemon_info", "Always 1; the labels say how the daemon runs.",
		[]string{"backend", "clock", "policy", "accounting", "arbitration"}, nil)
)

// Collector is sluiced's metrics over a StatsFunc.
type Collector struct{ stats StatsFunc }

// NewCollector returns the collector of stats.
func NewCollector(stats StatsFunc) *Collector { return &Collector{stats: stats} }

// Describe sends every family the collector may produce, so that a
// registry checks them.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range vmMetrics {
		ch <- m.desc
	}
	for _, m := range syscallLabelled {
		ch <- m.desc
	}
	for _, m := range syscallMetrics {
		ch <- m.desc
	}
	for _, d := range []*prometheus.Desc{peersRefused, turnHolder, turns, switches, pollerCPU, periods, vms, info, dispatchHist, turnaroundHist} {
		ch <- d
	}
}

var (
	dispatchHist = prometheus.NewDesc("sluice_vm_dispatch_seconds",
		"Time from a record's doorbell to its forwarding to the GPU (a scheduler's hold shows here).", []string{"vm"}, nil)
	turnaroundHist = prometheus.NewDesc("sluice_vm_turnaround_seconds",
		"Time from a record's doorbell to its completion.", []string{"vm"}, nil)
)

// histogram is h as a Prometheus histogram of seconds (cumulative buckets).
func histogram(d *prometheus.Desc, h hostapi.Histogram, vm string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.BoundsNs))
	var cum uint64
	for i, b := range h.BoundsNs {
		if i < len(h.Counts) {
			cum += h.Counts[i]
		}
		buckets[float64(b)/1e9] = cum
	}
	m, err := prometheus.NewConstHistogram(d, h.Count, float64(h.SumNs)/1e9, buckets, strings.ToValidUTF8(vm, "\uFFFD"))
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}

// Collect takes one snapshot and sends its samples. A failed snapshot is
// one invalid metric, which fails the scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.stats(context.Background())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(info, err)
		return
	}
	send := func(d *prometheus.Desc, typ prometheus.ValueType, v float64, labels ...string) {
		for i, l := range labels {
			labels[i] = strings.ToValidUTF8(l, "\uFFFD") // the library refuses invalid UTF-8
		}
		m, err := prometheus.NewConstMetric(d, typ, v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err)
		}
		ch <- m
	}
	for _, m := range vmMetrics {
		for _, v := range st.VMs {
			send(m.desc, m.typ, m.val(v), v.Name)
		}
	}
	for _, v := range st.VMs {
		ch <- histogram(dispatchHist, v.Dispatch, v.Name)
		ch <- histogram(turnaroundHist, v.Turnaround, v.Name)
		r := v.RefusedPeers
		for reason, n := range map[string]uint64{"foreign": r.Foreign, "no_handshake": r.NoHandshake, "full": r.Full, "other": r.Other} {
			send(peersRefused, counter, float64(n), v.Name, reason)
		}
	}
	for _, v := range st.VMs {
		if v.Syscalls == nil {
			continue
		}
		for _, m := range syscallLabelled {
			for k, n := range m.vals(v.Syscalls) {
				send(m.desc, counter, float64(n), v.Name, k)
			}
		}
		for _, m := range syscallMetrics {
			send(m.desc, m.typ, m.val(v.Syscalls), v.Name)
		}
	}
	if st.Arbitration == "turns" {
		for _, v := range st.VMs {
			send(turnHolder, gauge, boolean(v.TurnHolder), v.Name)
		}
		send(turns, counter, float64(st.Turns))
	}
	if st.ArbitrationAuto {
		send(switches, counter, float64(st.ArbitrationSwitches))
	}
	send(pollerCPU, counter, seconds(st.PollerCPUNs))
	send(periods, counter, float64(max(st.Periods, 0)))
	send(vms, gauge, float64(len(st.VMs)))
	arb := st.Arbitration
	if arb == "" {
		arb = "driver"
	}
	send(info, gauge, 1, st.Backend, st.Clock, st.Policy, st.Accounting, arb)
}

// NewRegistry is sluiced's registry: the Collector of stats, and the Go
// runtime's and the process's standard metrics. Handler serves the same.
func NewRegistry(stats StatsFunc) *prometheus.Registry {
	reg := runtimeRegistry()
	reg.MustRegister(NewCollector(stats))
	return reg
}

func runtimeRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves what NewRegistry(stats) gathers, in the format the
// scraper asks for (text by default). It takes the snapshot first, with
// the request's context: when that fails it calls fail, which answers
// (the host API's JSON error), and serves nothing else.
func Handler(stats StatsFunc, fail func(http.ResponseWriter, error)) http.Handler {
	runtime := runtimeRegistry()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := stats(r.Context())
		if err != nil {
			fail(w, err)
			return
		}
		snap := prometheus.NewRegistry()
		snap.MustRegister(NewCollector(func(context.Context) (hostapi.Stats, error) { return st, nil }))
		promhttp.HandlerFor(prometheus.Gatherers{runtime, snap},
			promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).ServeHTTP(w, r)
	})
}
