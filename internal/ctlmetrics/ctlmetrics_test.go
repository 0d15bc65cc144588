package ctlmetrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestInstrumentAndServe(t *testing.T) {
	m := New(func(context.Context) (Fleet, error) {
		return Fleet{HostsUp: 2, HostsDown: 1, GPUs: 5, VMs: 4, VMsOnDownHosts: 1}, nil
	})
	h := m.Instrument(func(r *http.Request) string { return map[string]string{"/a": "GET /a", "/b": "/"}[r.URL.Path] },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/a" {
				_, _ = w.Write([]byte("ok")) // an implicit 200
				return
			}
			w.WriteHeader(http.StatusTeapot)
			w.WriteHeader(http.StatusOK) // superfluous: the first code counts
		}))
	for _, p := range []string{"/a", "/a", "/b", "/c"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
	}
	m.Ingested(3, 1)
	m.Ingested(-1, 0) // never decreases
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	for _, want := range []string{
		`sluice_controller_http_requests_total{code="200",route="GET /a"} 2`,
		`sluice_controller_http_requests_total{code="418",route="other"} 2`,
		`sluice_controller_http_request_duration_seconds_count{route="GET /a"} 2`,
		`sluice_controller_usage_intervals_total{result="accepted"} 3`,
		`sluice_controller_usage_intervals_total{result="duplicate"} 1`,
		`sluice_controller_hosts{state="up"} 2`,
		`sluice_controller_hosts{state="down"} 1`,
		`sluice_controller_gpus 5`,
		`sluice_controller_vms{host_state="up"} 3`,
		`sluice_controller_vms{host_state="down"} 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("no %q in\n%s", want, body)
		}
	}
}

// TestEveryFamilyDescribed: once used, every sluice_ family described is
// gathered (the dashboard's test relies on gathering).
func TestEveryFamilyDescribed(t *testing.T) {
	m := New(func(context.Context) (Fleet, error) { return Fleet{}, nil })
	m.Instrument(func(*http.Request) string { return "" }, http.NotFoundHandler()).
		ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	ch := make(chan *prometheus.Desc, 16)
	for _, c := range []prometheus.Collector{m.requests, m.durations, m.intervals, fleetCollector(nil)} {
		c.Describe(ch)
	}
	close(ch)
	described := len(ch)
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "sluice_") {
			n++
		}
	}
	if n != described || n != 6 {
		t.Errorf("%d sluice families gathered, %d described, want 6", n, described)
	}
}

func TestFleetFails(t *testing.T) {
	m := New(func(context.Context) (Fleet, error) { return Fleet{}, errors.New("db gone") })
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "db gone") {
		t.Errorf("%d %s", w.Code, w.Body)
	}
}
