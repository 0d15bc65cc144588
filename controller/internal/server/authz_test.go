package server

import (
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// specRoutes lists "METHOD /path" for every operation in openapi.yaml, so
// that a route added to the spec and not to the tables below fails here.
func specRoutes(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../../api/controllerapi/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for path, item := range doc.Paths {
		for method := range item {
			if method != "parameters" {
				out = append(out, strings.ToUpper(method)+" "+path)
			}
		}
	}
	sort.Strings(out)
	return out
}

// call is one request against a route: a concrete path and a valid body.
type call struct {
	route, path, body string
}

// calls has one well-formed request per route, against acme's VM "web" on
// host h1.
var calls = []call{
	{"GET /v1/whoami", "/v1/whoami", ""},
	{"GET /v1/tokens", "/v1/tokens", ""},
	{"POST /v1/tokens", "/v1/tokens", `{"name":"x","role":"tenant","tenant":"acme"}`},
	{"DELETE /v1/tokens/{id}", "/v1/tokens/nosuch", ""},
	{"GET /v1/hosts", "/v1/hosts", ""},
	{"GET /v1/hosts/{name}", "/v1/hosts/h1", ""},
	{"PUT /v1/hosts/{name}", "/v1/hosts/h1", `{"address":"h1:7071","gpus":[{"index":0,"model":"sim","memory_bytes":1073741824}]}`},
	{"DELETE /v1/hosts/{name}", "/v1/hosts/h2", ""},
	{"POST /v1/hosts/{name}/drain", "/v1/hosts/h2/drain", ""},
	{"POST /v1/hosts/{name}/undrain", "/v1/hosts/h2/undrain", ""},
	{"POST /v1/hosts/{name}/heartbeat", "/v1/hosts/h1/heartbeat", ""},
	{"PUT /v1/hosts/{name}/endpoints", "/v1/hosts/h1/endpoints", `{"vms":[]}`},
	{"GET /v1/gpus", "/v1/gpus", ""},
	{"GET /v1/vms", "/v1/vms?tenant=acme", ""},
	{"POST /v1/vms", "/v1/vms", `{"name":"web2","tenant":"acme"}`},
	{"GET /v1/vms/{name}", "/v1/vms/web", ""},
	{"PATCH /v1/vms/{name}", "/v1/vms/web", `{"weight":2}`},
	{"DELETE /v1/vms/{name}", "/v1/vms/web", ""},
	{"POST /v1/vms/{name}/move", "/v1/vms/web/move", `{}`},
	{"GET /v1/vms/{name}/domain.xml", "/v1/vms/web/domain.xml", ""},
	{"GET /v1/usage", "/v1/usage?tenant=acme", ""},
	{"POST /v1/usage", "/v1/usage", `{"host":"h1","intervals":[]}`},
	{"GET /v1/usage.csv", "/v1/usage.csv?tenant=acme", ""},
	{"GET /v1/events", "/v1/events", ""},
}

func TestCallsCoverTheSpec(t *testing.T) {
	var have []string
	for _, c := range calls {
		have = append(have, c.route)
	}
	sort.Strings(have)
	if want := specRoutes(t); strings.Join(have, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the test's routes:\n%s\nthe spec's:\n%s", strings.Join(have, "\n"), strings.Join(want, "\n"))
	}
}

func withWeb(t *testing.T) *env {
	e := newEnv(t)
	e.registerHost("h1", 8*gib)
	e.registerHost("h2", 8*gib)
	e.createVM(e.acme, `{"name":"web","tenant":"acme"}`)
	return e
}

func TestEveryRouteRejectsUnauthenticated(t *testing.T) {
	e := withWeb(t)
	for _, c := range calls {
		for _, tok := range []struct{ name, secret string }{{"no token", ""}, {"unknown token", "slc_nope"}, {"revoked token", e.revoked}} {
			r := e.do(strings.Fields(c.route)[0], c.path, tok.secret, c.body)
			if r.status != http.StatusUnauthorized || r.apiError(t).Code != "unauthenticated" {
				t.Errorf("%s with %s: %d %s, want 401 unauthenticated", c.route, tok.name, r.status, r.body)
			}
		}
	}
	// A malformed Authorization header is no token either.
	if r := e.do("GET", "/v1/whoami", "", ""); r.status != 401 {
		t.Errorf("whoami without a token: %d", r.status)
	}
}

// TestEveryRouteRejectsOtherTenants: tenant "other" gets 404 for acme's VM
// by name (it does not exist for it), 403 for everything that names acme or
// needs another role; nothing of acme's changes.
func TestEveryRouteRejectsOtherTenants(t *testing.T) {
	e := withWeb(t)
	want := map[string]struct {
		status int
		field  string
	}{
		"GET /v1/whoami":                  {200, ""}, // its own identity
		"GET /v1/tokens":                  {403, ""},
		"POST /v1/tokens":                 {403, ""},
		"DELETE /v1/tokens/{id}":          {403, ""},
		"GET /v1/hosts":                   {403, ""},
		"GET /v1/hosts/{name}":            {403, ""},
		"PUT /v1/hosts/{name}":            {403, ""},
		"DELETE /v1/hosts/{name}":         {403, ""},
		"POST /v1/hosts/{name}/drain":     {403, ""},
		"POST /v1/hosts/{name}/undrain":   {403, ""},
		"POST /v1/hosts/{name}/heartbeat": {403, ""},
		"PUT /v1/hosts/{name}/endpoints":  {403, ""},
		"GET /v1/gpus":                    {403, ""},
		"GET /v1/vms":                     {403, "tenant"},
		"POST /v1/vms":                    {403, "tenant"},
		"GET /v1/vms/{name}":              {404, "name"},
		"PATCH /v1/vms/{name}":            {404, "name"},
		"DELETE /v1/vms/{name}":           {404, "name"},
		"POST /v1/vms/{name}/move":        {403, ""},
		"GET /v1/vms/{name}/domain.xml":   {404, "name"},
		"GET /v1/usage":                   {403, "tenant"},
		"POST /v1/usage":                  {403, ""},
		"GET /v1/usage.csv":               {403, "tenant"},
		"GET /v1/events":                  {403, ""},
	}
	for _, c := range calls {
		w, ok := want[c.route]
		if !ok {
			t.Fatalf("no expectation for %s", c.route)
		}
		r := e.do(strings.Fields(c.route)[0], c.path, e.other, c.body)
		if r.status != w.status || (w.status != 200 && r.field() != w.field) {
			t.Errorf("%s as another tenant: %d %s, want %d field %q", c.route, r.status, r.body, w.status, w.field)
		}
	}
	// acme's VM is untouched and still acme's; a host token may not use
	// tenant routes nor act for another host.
	var vm struct{ Weight int64 }
	e.must(200, "GET", "/v1/vms/web", e.acme, "", &vm)
	if vm.Weight != 1 {
		t.Fatalf("acme's VM changed: weight %d", vm.Weight)
	}
	for _, c := range []call{
		{"", "/v1/vms/web", ""},
		{"", "/v1/hosts/h2/heartbeat", ""},
	} {
		method := "GET"
		if strings.HasSuffix(c.path, "heartbeat") {
			method = "POST"
		}
		if r := e.do(method, c.path, e.h1, c.body); r.status != 403 {
			t.Errorf("host token %s %s: %d %s, want 403", method, c.path, r.status, r.body)
		}
	}
	if r := e.do("POST", "/v1/usage", e.h1, `{"host":"h2","intervals":[]}`); r.status != 403 || r.field() != "host" {
		t.Errorf("host h1 pushing h2's usage: %d %s", r.status, r.body)
	}
	// Usage of acme's VM asked for by name by another tenant: nothing.
	var rep struct{ Intervals []any }
	e.must(200, "GET", "/v1/usage?vm=web", e.other, "", &rep)
	if len(rep.Intervals) != 0 {
		t.Fatalf("another tenant sees acme's usage: %+v", rep)
	}
}

// TestEveryBodyRouteRejectsBadJSON: malformed JSON, unknown fields and
// wrong types are 400 naming the field, and change nothing.
func TestEveryBodyRouteRejectsBadJSON(t *testing.T) {
	e := withWeb(t)
	bodies := []struct {
		body, field string
	}{
		{`{`, ""},
		{`not json`, ""},
		{`{"bogus": 1}`, "bogus"},
		{`[1,2]`, ""},
		{`{} {}`, ""},
	}
	typed := map[string]struct{ body, field string }{
		"POST /v1/tokens":                {`{"name":"x","role":7}`, "role"},
		"PUT /v1/hosts/{name}":           {`{"address":"a","gpus":[{"index":"zero"}]}`, "gpus.index"},
		"POST /v1/vms":                   {`{"name":"x","tenant":"acme","weight":"heavy"}`, "weight"},
		"PATCH /v1/vms/{name}":           {`{"cap":"half"}`, "cap"},
		"POST /v1/vms/{name}/move":       {`{"gpu":1.5}`, "gpu"},
		"POST /v1/usage":                 {`{"host":"h1","intervals":[{"vm":"web","seq":-1.5}]}`, "intervals.seq"},
		"PUT /v1/hosts/{name}/endpoints": {`{"vms":[{"vm":"web","endpoint":"/e","vectors":"many"}]}`, "vms.vectors"},
	}
	n := 0
	for _, c := range calls {
		if c.body == "" {
			continue
		}
		n++
		method := strings.Fields(c.route)[0]
		ty, ok := typed[c.route]
		if !ok {
			t.Errorf("no wrong-type body for %s", c.route)
		}
		for _, b := range append(bodies, struct{ body, field string }{ty.body, ty.field}) {
			r := e.do(method, c.path, e.op, b.body)
			if r.status != 400 || r.apiError(t).Code != "invalid" || r.field() != b.field || r.apiError(t).Message == "" {
				t.Errorf("%s with %q: %d %s, want 400 invalid field %q", c.route, b.body, r.status, r.body, b.field)
			}
		}
		// An unknown field nested in an object is named too.
		if c.route == "PUT /v1/hosts/{name}" {
			r := e.do(method, c.path, e.op, `{"address":"a","gpus":[{"index":0,"model":"m","memory_bytes":1,"colour":"red"}]}`)
			if r.status != 400 || r.field() != "colour" {
				t.Errorf("nested unknown field: %d %s", r.status, r.body)
			}
		}
	}
	if n != len(typed) {
		t.Errorf("%d routes with bodies, %d wrong-type cases", n, len(typed))
	}
	// Nothing changed: web is as created, no web2, no new token.
	var vms []struct{ Name string }
	e.must(200, "GET", "/v1/vms", e.op, "", &vms)
	if len(vms) != 1 {
		t.Fatalf("VMs after bad requests: %+v", vms)
	}
	// Bad parameters are 400 naming the parameter.
	for path, field := range map[string]string{
		"/v1/usage?from=yesterday": "from",
		"/v1/events?limit=lots":    "limit",
		"/v1/events?limit=0":       "limit",
		"/v1/usage?from=2026-11-02T00:00:00Z&to=2026-11-01T00:00:00Z":     "to",
		"/v1/usage.csv?from=2026-11-02T00:00:00Z&to=2026-11-01T00:00:00Z": "to",
	} {
		if r := e.do("GET", path, e.op, ""); r.status != 400 || r.field() != field {
			t.Errorf("GET %s: %d %s, want 400 field %q", path, r.status, r.body, field)
		}
	}
	if r := e.do("GET", "/v1/nope", e.op, ""); r.status != 404 || r.apiError(t).Code != "not_found" {
		t.Errorf("unknown route: %d %s", r.status, r.body)
	}
}
