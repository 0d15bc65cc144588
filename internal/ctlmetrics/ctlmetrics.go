// Package ctlmetrics is sluice-controller's Prometheus metrics, through the
// Prometheus client library: its HTTP requests by route and status code
// (and their durations, a histogram), the fleet as its store sees it at
// scrape time (hosts up and down, GPUs, VMs), and the usage intervals it
// ingested.
//
// It lives outside controller/ so that the Grafana dashboard's test
// (deploy/grafana) can read the names from the real registry.
package ctlmetrics

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Fleet is what the store holds now.
type Fleet struct {
	HostsUp, HostsDown int
	GPUs               int
	VMs                int // all VMs
	VMsOnDownHosts     int // of them, placed on a host that is down
}

// FleetFunc reads the fleet; a scrape calls it once.
type FleetFunc func(context.Context) (Fleet, error)

// Metrics is the controller's registry and the metrics it updates.
type Metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	durations *prometheus.HistogramVec
	intervals *prometheus.CounterVec
}

// OtherRoute is the route label of requests that match no route of the API.
const OtherRoute = "other"

// New returns the metrics, fleet read at every scrape.
func New(fleet FleetFunc) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controller_http_requests_total",
			Help: `API requests answered, by route (the API's method and path pattern, or "other") and status code.`,
		}, []string{"route", "code"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_controller_http_request_duration_seconds",
			Help:    "Time to answer an API request, by route.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route"}),
		intervals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controller_usage_intervals_total",
			Help: "Usage intervals pushed by hosts and stored: accepted (new) or duplicate (a redelivery, counted once).",
		}, []string{"result"}),
	}
	m.reg.MustRegister(m.requests, m.durations, m.intervals, fleetCollector(fleet),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range []string{"accepted", "duplicate"} {
		m.intervals.WithLabelValues(r) // both series exist from the start, at 0
	}
	return m
}

// Registry is the registry Handler serves.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the format the scraper asks for.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

// Ingested counts a stored usage batch.
func (m *Metrics) Ingested(accepted, duplicates int) {
	m.intervals.WithLabelValues("accepted").Add(float64(max(accepted, 0)))
	m.intervals.WithLabelValues("duplicate").Add(float64(max(duplicates, 0)))
}

// Instrument counts and times every request next answers. route names
// the request's route: mux.Handler's pattern for a http.ServeMux ("" or
// "/" for the catch-all count as OtherRoute).
func (m *Metrics) Instrument(route func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rt := route(r)
		if rt == "" || rt == "/" {
			rt = OtherRoute
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		m.requests.WithLabelValues(rt, strconv.Itoa(sw.status)).Inc()
		m.durations.WithLabelValues(rt).Observe(time.Since(start).Seconds())
	})
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var (
	hostsDesc = prometheus.NewDesc("sluice_controller_hosts", "Registered hosts, by state (up, down: missed its heartbeats).", []string{"state"}, nil)
	gpusDesc  = prometheus.NewDesc("sluice_controller_gpus", "GPUs the registered hosts declared.", nil, nil)
	vmsDesc   = prometheus.NewDesc("sluice_controller_vms", "VMs placed, by the state of their host (up, down).", []string{"host_state"}, nil)
)

// fleetCollector reads the fleet once per scrape.
type fleetCollector FleetFunc

func (fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- hostsDesc
	ch <- gpusDesc
	ch <- vmsDesc
}

func (f fleetCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fl, err := f(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(hostsDesc, err)
		return
	}
	g := func(d *prometheus.Desc, n int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(n), labels...)
	}
	g(hostsDesc, fl.HostsUp, "up")
	g(hostsDesc, fl.HostsDown, "down")
	g(gpusDesc, fl.GPUs)
	g(vmsDesc, fl.VMs-fl.VMsOnDownHosts, "up")
	g(vmsDesc, fl.VMsOnDownHosts, "down")
}
