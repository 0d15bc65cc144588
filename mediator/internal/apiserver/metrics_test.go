package apiserver

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parseProm reads the text format back with the Prometheus parser.
func parseProm(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, text)
	}
	return fams
}

// vmValue is the counter or gauge of family name for vm; ok false if none.
func vmValue(fams map[string]*dto.MetricFamily, name, vm string) (v float64, ok bool) {
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "vm" && l.GetValue() == vm {
				if m.Counter != nil {
					return m.Counter.GetValue(), true
				}
				return m.Gauge.GetValue(), true
			}
		}
	}
	return 0, false
}

// TestMetrics: GET /metrics serves the daemon's stats through the client
// library (internal/hostmetrics has the families and values).
func TestMetrics(t *testing.T) {
	f := newFake()
	f.stats = sampleStats()
	w := do(t, Handler(f), "GET", "/metrics", "")
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	fams := parseProm(t, w.Body.String())
	for _, tc := range []struct {
		name string
		want float64
	}{
		{"sluice_vm_gpu_seconds_total", 1.5},
		{"sluice_vm_held_seconds_total", 2.500000001},
		{"sluice_vm_share", 0.625},
		{"sluice_vm_budget_stalls_total", 17},
	} {
		if got, ok := vmValue(fams, tc.name, "busy"); !ok || got != tc.want {
			t.Errorf("%s{vm=busy} = %v (%v), want %v", tc.name, got, ok, tc.want)
		}
	}
	if got := fams["sluice_poller_cpu_seconds_total"].GetMetric(); len(got) != 1 || got[0].GetCounter().GetValue() != 12.345678901 {
		t.Errorf("sluice_poller_cpu_seconds_total: %v", got)
	}
}

// TestMetricsFailing: stats the daemon cannot take fail the scrape.
func TestMetricsFailing(t *testing.T) {
	f := newFake()
	f.fail = errors.New("disk on fire")
	w := do(t, Handler(f), "GET", "/metrics", "")
	if w.Code != http.StatusInternalServerError {
		t.Errorf("status %d, want 500: %s", w.Code, w.Body)
	}
}

// TestMetricsHandler: the TCP listener's handler serves /metrics and
// nothing else of the host API.
func TestMetricsHandler(t *testing.T) {
	f := newFake()
	f.stats = sampleStats()
	h := MetricsHandler(f)
	if w := do(t, h, "GET", "/metrics", ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `sluice_vm_doorbells_total{vm="busy"} 42`) {
		t.Errorf("/metrics: %d\n%s", w.Code, w.Body)
	}
	for _, path := range []string{"/v1/stats", "/v1/vms", "/v1/version"} {
		if w := do(t, h, "GET", path, ""); w.Code != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", path, w.Code)
		}
	}
}
