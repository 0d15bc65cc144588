package server

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// metricValue is the sample of family name with exactly the given labels
// (name=value pairs, sorted by name); ok false if there is none.
func metricValue(t *testing.T, e *env, name string, labels ...string) (float64, bool) {
	t.Helper()
	fams, err := e.srv.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
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
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// TestMetrics: requests are counted by route pattern and code (401s and
// unknown routes too), the fleet is read at scrape time, ingested usage
// is counted once.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	e.registerHost("h1", 8*gib)
	e.registerHost("h2", 8*gib, 8*gib)
	e.createVM(e.op, `{"name":"web","tenant":"acme","host":"h1"}`)
	e.createVM(e.op, `{"name":"db","tenant":"acme","host":"h2"}`)
	e.must(200, "GET", "/v1/vms/web", e.acme, "", nil)
	e.must(404, "GET", "/v1/vms/db-nope", e.acme, "", nil)
	e.must(401, "GET", "/v1/vms", "", "", nil)
	e.must(404, "GET", "/v1/nowhere", e.op, "", nil)
	e.must(200, "POST", "/v1/usage", e.h1, usageBody("h1", 0, 1), nil)
	e.must(200, "POST", "/v1/usage", e.h1, usageBody("h1", 1, 2), nil)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_controller_http_requests_total", []string{"code", "200", "route", "GET /v1/vms/{name}"}, 1},
		{"sluice_controller_http_requests_total", []string{"code", "404", "route", "GET /v1/vms/{name}"}, 1},
		{"sluice_controller_http_requests_total", []string{"code", "401", "route", "GET /v1/vms"}, 1},
		{"sluice_controller_http_requests_total", []string{"code", "404", "route", "other"}, 1},
		{"sluice_controller_http_requests_total", []string{"code", "201", "route", "POST /v1/vms"}, 2},
		{"sluice_controller_http_requests_total", []string{"code", "200", "route", "PUT /v1/hosts/{name}"}, 2},
		{"sluice_controller_http_request_duration_seconds", []string{"route", "POST /v1/usage"}, 2},
		{"sluice_controller_usage_intervals_total", []string{"result", "accepted"}, 3},
		{"sluice_controller_usage_intervals_total", []string{"result", "duplicate"}, 1},
		{"sluice_controller_hosts", []string{"state", "up"}, 2},
		{"sluice_controller_hosts", []string{"state", "down"}, 0},
		{"sluice_controller_gpus", nil, 3},
		{"sluice_controller_vms", []string{"host_state", "up"}, 2},
		{"sluice_controller_vms", []string{"host_state", "down"}, 0},
	} {
		if got, ok := metricValue(t, e, tc.name, tc.labels...); !ok || got != tc.want {
			t.Errorf("%s%q = %v (%v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	// h1 goes silent: down at the next scrape, with its VM, before any
	// sweep.
	e.clock.Advance(20 * time.Second)
	e.must(200, "POST", "/v1/hosts/h2/heartbeat", e.op, "", nil)
	e.clock.Advance(20 * time.Second)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_controller_hosts", []string{"state", "up"}, 1},
		{"sluice_controller_hosts", []string{"state", "down"}, 1},
		{"sluice_controller_vms", []string{"host_state", "up"}, 1},
		{"sluice_controller_vms", []string{"host_state", "down"}, 1},
	} {
		if got, ok := metricValue(t, e, tc.name, tc.labels...); !ok || got != tc.want {
			t.Errorf("after h1 went silent: %s%q = %v (%v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
}
