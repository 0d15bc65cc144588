package grafana

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/internal/ctlmetrics"
	"github.com/sluice-gpu/sluice/internal/hostmetrics"
)

// fullStats makes every family of sluiced's collector appear: a VM with
// system calls, under arbitration turns.
func fullStats(context.Context) (hostapi.Stats, error) {
	return hostapi.Stats{Arbitration: "turns", VMs: []hostapi.VMStats{{VM: hostapi.VM{Name: "vm",
		Syscalls: &hostapi.SyscallStats{Calls: map[string]uint64{"openat": 1}, Errnos: map[string]uint64{"OK": 1}}}}}}, nil
}

// registryNames are the series names reg gathers: a family's name, and for
// a histogram or summary the _bucket, _sum and _count series PromQL sees.
func registryNames(t *testing.T, reg prometheus.Gatherer, into map[string]bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		into[f.GetName()] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			into[f.GetName()+"_bucket"] = true
			fallthrough
		case dto.MetricType_SUMMARY:
			into[f.GetName()+"_sum"] = true
			into[f.GetName()+"_count"] = true
		}
	}
}

// knownMetrics gathers the real registries of sluiced and the controller,
// used once so that their labelled families have samples.
func knownMetrics(t *testing.T) map[string]bool {
	names := map[string]bool{}
	registryNames(t, hostmetrics.NewRegistry(fullStats), names)
	m := ctlmetrics.New(func(context.Context) (ctlmetrics.Fleet, error) { return ctlmetrics.Fleet{}, nil })
	m.Instrument(func(*http.Request) string { return "GET /v1/vms" }, http.NotFoundHandler()).
		ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/vms", nil))
	registryNames(t, m.Registry(), names)
	return names
}

var (
	grafanaVar  = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	stringLit   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	selector    = regexp.MustCompile(`\{[^}]*\}`)
	rangeSel    = regexp.MustCompile(`\[[^\]]*\]`)
	labelList   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	token       = regexp.MustCompile(`\d[\w.]*|[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	labelValues = regexp.MustCompile(`^\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{,]`)
	keywords    = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
		"group_left", "group_right", "inf", "nan", "atan2"}
)

// metricNames are the metric names a PromQL expression selects: what is
// left once variables, strings, label matchers, ranges and label lists are
// taken out, less function calls, keywords and numbers.
func metricNames(expr string) []string {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		return []string{m[1]}
	}
	s := grafanaVar.ReplaceAllString(expr, " ")
	s = stringLit.ReplaceAllString(s, " ")
	s = selector.ReplaceAllString(s, " ")
	s = rangeSel.ReplaceAllString(s, " ")
	s = labelList.ReplaceAllString(s, " ")
	var out []string
	for _, tok := range token.FindAllString(s, -1) {
		if tok[0] >= '0' && tok[0] <= '9' || strings.HasSuffix(tok, "(") || slices.Contains(keywords, strings.ToLower(tok)) {
			continue
		}
		out = append(out, tok)
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`rate(sluice_vm_gpu_seconds_total{vm=~"$vm"}[$__rate_interval])`:                                {"sluice_vm_gpu_seconds_total"},
		`sum by (vm, le) (rate(a_bucket[5m])) / on (vm) group_left (x) b offset 1h > bool 0.5`:          {"a_bucket", "b"},
		`histogram_quantile(0.99, sum without (instance) (rate(x_bucket{route="GET /v1/{name}"}[1m])))`: {"x_bucket"},
		`sluice_nope_total`:                                {"sluice_nope_total"},
		`label_values(sluice_daemon_info, instance)`:       {"sluice_daemon_info"},
		`label_values(sluice_vm_share{instance="a"}, vm)`:  {"sluice_vm_share"},
		`max(sluice_vm_share) or vector(0) unless ${x}`:    {"sluice_vm_share"},
		`sum(rate(sluice_vm_kernels_total[5m])) * 1e9 - 2`: {"sluice_vm_kernels_total"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// expressions are the dashboard's PromQL: every target's expr, in panels
// and in rows' panels, and the query variables'.
func expressions(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("sluice.json")
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	}
	type panel struct {
		ID      int      `json:"id"`
		Title   string   `json:"title"`
		Type    string   `json:"type"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var d struct {
		Title      string  `json:"title"`
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("sluice.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard without title or uid")
	}
	exprs := map[string]string{}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d twice", p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q, target %s: no expr", p.Title, tg.RefID)
				}
				exprs["panel "+p.Title+" "+tg.RefID] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		exprs["variable "+v.Name] = q.Query
	}
	return exprs
}

// TestDashboardNamesOnlyRealMetrics: a renamed or dropped metric, or a
// typo in the dashboard, fails here rather than as an empty panel.
func TestDashboardNamesOnlyRealMetrics(t *testing.T) {
	known := knownMetrics(t)
	exprs := expressions(t)
	if len(exprs) < 20 {
		t.Fatalf("%d expressions: the dashboard was not read whole", len(exprs))
	}
	used := map[string]bool{}
	for where, expr := range exprs {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, n := range names {
			used[n] = true
			if !known[n] {
				t.Errorf("%s: %q names %s, which neither sluiced nor sluice-controller has", where, expr, n)
			}
		}
	}
	// What the issue asks the dashboard to show.
	for _, n := range []string{"sluice_vm_gpu_seconds_total", "sluice_vm_share", "sluice_vm_held_seconds_total",
		"sluice_vm_syscalls_total", "sluice_controller_hosts", "sluice_controller_http_request_duration_seconds_bucket",
		"sluice_poller_cpu_seconds_total", "sluice_vm_kernels_total", "sluice_vm_errors_total",
		"sluice_vm_turnaround_seconds_bucket", "sluice_vm_dispatch_seconds_bucket"} {
		if !used[n] {
			t.Errorf("the dashboard does not show %s", n)
		}
	}
}
