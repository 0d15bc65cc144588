package hostapi

import (
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"math"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
)

// specTypes are the Go types openapi.yaml describes, each under its Go name
// in components/schemas.
var specTypes = []any{Version{}, CreateVMRequest{}, UpdateVMRequest{}, PolicyState{}, VM{}, Usage{}, ChannelStats{},
	VMStats{}, Stats{}, Error{}, SyscallStats{}, Histogram{}, PeerRefusals{}}

// specRoutes is what every route takes and answers. body is a schema name,
// "[]Name" for an array of it, "text" for text/plain, "" for no body.
var specRoutes = []struct {
	route   string
	request string
	status  string
	body    string
	errors  []int
}{
	{"GET /v1/version", "", "200", "Version", []int{403, 500}},
	{"POST /v1/vms", "CreateVMRequest", "201", "VM", []int{400, 403, 409, 500, 503}},
	{"GET /v1/vms", "", "200", "[]VM", []int{403, 500}},
	{"GET /v1/vms/{name}", "", "200", "VM", []int{403, 404, 500}},
	{"DELETE /v1/vms/{name}", "", "204", "", []int{403, 404, 500}},
	{"GET /v1/vms/{name}/usage", "", "200", "Usage", []int{403, 404, 500}},
	{"PATCH /v1/vms/{name}", "UpdateVMRequest", "200", "VM", []int{400, 403, 404, 500}},
	{"GET /v1/policy", "", "200", "PolicyState", []int{403, 500}},
	{"PUT /v1/policy", "PolicyState", "200", "PolicyState", []int{400, 403, 500}},
	{"GET /v1/stats", "", "200", "Stats", []int{403, 500}},
	{"GET /metrics", "", "200", "text", []int{403, 500}},
}

type spec map[string]any

func loadSpec(t *testing.T) spec {
	t.Helper()
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	v, err := readYAML(string(b))
	if err != nil {
		t.Fatalf("reading openapi.yaml: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("openapi.yaml is not a mapping")
	}
	return m
}

// at walks mapping keys; it returns nil where one is missing.
func at(v any, keys ...string) any {
	if s, ok := v.(spec); ok {
		v = map[string]any(s)
	}
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func mapAt(v any, keys ...string) map[string]any {
	m, _ := at(v, keys...).(map[string]any)
	return m
}

// deref follows a $ref within the document, once or repeatedly.
func (s spec) deref(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	for v != nil {
		ref, ok := v["$ref"].(string)
		if !ok {
			return v
		}
		if len(v) != 1 {
			t.Errorf("$ref %s has siblings, which OpenAPI 3.0 ignores", ref)
		}
		path, ok := strings.CutPrefix(ref, "#/")
		if !ok {
			t.Fatalf("$ref %q is not local", ref)
		}
		v = mapAt(s, strings.Split(path, "/")...)
		if v == nil {
			t.Fatalf("$ref %q does not resolve", ref)
		}
	}
	return v
}

// specOps lists "METHOD /path" for every operation in paths.
func (s spec) ops() map[string]map[string]any {
	out := map[string]map[string]any{}
	for path, item := range mapAt(s, "paths") {
		for method, op := range item.(map[string]any) {
			if method == "parameters" {
				continue
			}
			out[strings.ToUpper(method)+" "+path], _ = op.(map[string]any)
		}
	}
	return out
}

func TestSpecHeader(t *testing.T) {
	s := loadSpec(t)
	if got := at(s, "openapi"); got != "3.0.3" {
		t.Errorf("openapi = %v, want 3.0.3", got)
	}
	for _, k := range []string{"title", "version", "description"} {
		if v, _ := at(s, "info", k).(string); v == "" {
			t.Errorf("info.%s is missing", k)
		}
	}
}

// docRoutes reads the routes listed in the package doc comment.
func docRoutes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s*(GET|POST|PUT|PATCH|DELETE)\s+(/\S+)`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(f.Doc.Text(), -1) {
		out = append(out, m[1]+" "+m[2])
	}
	if len(out) == 0 {
		t.Fatal("the package doc lists no routes")
	}
	return out
}

func TestSpecRoutesMatchDoc(t *testing.T) {
	s := loadSpec(t)
	var inSpec, want, table []string
	for r := range s.ops() {
		inSpec = append(inSpec, r)
	}
	want = append(docRoutes(t), "GET /metrics") // the doc lists the /v1 routes only
	for _, r := range specRoutes {
		table = append(table, r.route)
	}
	sort.Strings(inSpec)
	sort.Strings(want)
	sort.Strings(table)
	if !slices.Equal(inSpec, want) {
		t.Errorf("routes in openapi.yaml:\n %v\nin the package doc (and /metrics):\n %v", inSpec, want)
	}
	if !slices.Equal(table, want) {
		t.Errorf("specRoutes in this test: %v, want %v", table, want)
	}
}

// codeOfStatus is the wire code each error status carries.
func codeOfStatus(t *testing.T) map[int]string {
	t.Helper()
	m := map[int]string{http.StatusForbidden: CodeForbidden, http.StatusUnauthorized: CodeUnauthorized}
	for _, err := range []error{ErrNotFound, ErrExists, ErrInvalid, ErrUnavailable, errors.New("other")} {
		status, code := StatusOf(err)
		m[status] = code
	}
	return m
}

func TestSpecOperations(t *testing.T) {
	s := loadSpec(t)
	ops := s.ops()
	codes := codeOfStatus(t)
	for _, r := range specRoutes {
		t.Run(r.route, func(t *testing.T) {
			op := ops[r.route]
			if op == nil {
				t.Fatalf("%s is not in openapi.yaml", r.route)
			}
			if id, _ := op["operationId"].(string); id == "" {
				t.Error("no operationId")
			}
			s.checkPathParams(t, r.route)
			s.checkRequest(t, op, r.request)
			resps := mapAt(op, "responses")
			want := []string{r.status}
			for _, st := range r.errors {
				want = append(want, fmt.Sprint(st))
			}
			var got []string
			for k := range resps {
				got = append(got, k)
			}
			sort.Strings(got)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("response codes %v, want %v", got, want)
			}
			s.checkBody(t, s.deref(t, mapAt(resps, r.status)), r.body)
			for _, st := range r.errors {
				resp := s.deref(t, mapAt(resps, fmt.Sprint(st)))
				s.checkBody(t, resp, "Error")
				desc, _ := resp["description"].(string)
				if code := codes[st]; code == "" || !strings.Contains(desc, "(code "+code+")") {
					t.Errorf("%d response %q does not name its code %q", st, desc, code)
				}
			}
		})
	}
}

func (s spec) checkPathParams(t *testing.T, route string) {
	_, path, _ := strings.Cut(route, " ")
	want := regexp.MustCompile(`\{(\w+)\}`).FindAllStringSubmatch(path, -1)
	params, _ := at(s, "paths", path, "parameters").([]any)
	var got []string
	for _, p := range params {
		pm, _ := p.(map[string]any)
		pm = s.deref(t, pm)
		if pm["in"] != "path" || pm["required"] != "true" || at(pm, "schema", "type") != "string" {
			t.Errorf("parameter %v: want a required string path parameter", pm["name"])
		}
		got = append(got, fmt.Sprint(pm["name"]))
	}
	if len(got) != len(want) {
		t.Fatalf("path parameters %v, want those of %s", got, path)
	}
	for i := range want {
		if got[i] != want[i][1] {
			t.Errorf("path parameter %q, want %q", got[i], want[i][1])
		}
	}
}

func (s spec) checkRequest(t *testing.T, op map[string]any, want string) {
	rb := mapAt(op, "requestBody")
	if want == "" {
		if rb != nil {
			t.Errorf("unexpected requestBody")
		}
		return
	}
	if at(rb, "required") != "true" {
		t.Errorf("requestBody is not required")
	}
	if ref := at(rb, "content", "application/json", "schema", "$ref"); ref != "#/components/schemas/"+want {
		t.Errorf("request schema %v, want %s", ref, want)
	}
}

// checkBody checks a response's content against body (see specRoutes).
func (s spec) checkBody(t *testing.T, resp map[string]any, body string) {
	t.Helper()
	if d, _ := resp["description"].(string); d == "" {
		t.Errorf("response without a description")
	}
	content := mapAt(resp, "content")
	switch {
	case body == "":
		if content != nil {
			t.Errorf("response has content, want none")
		}
	case body == "text":
		if at(content, "text/plain; version=0.0.4", "schema", "type") != "string" || len(content) != 1 {
			t.Errorf("content %v, want text/plain; version=0.0.4", content)
		}
	default:
		schema := mapAt(content, "application/json", "schema")
		if name, ok := strings.CutPrefix(body, "[]"); ok {
			if schema["type"] != "array" {
				t.Errorf("schema %v, want an array of %s", schema, name)
			}
			schema, body = mapAt(schema, "items"), name
		}
		if schema["$ref"] != "#/components/schemas/"+body || len(content) != 1 {
			t.Errorf("content %v, want application/json %s", content, body)
		}
	}
}

// jsonField is one JSON property of a Go type.
type jsonField struct {
	name      string
	typ       reflect.Type
	omitempty bool
}

// jsonFields lists a struct's JSON properties as encoding/json sees them,
// with untagged embedded structs flattened.
func jsonFields(typ reflect.Type) []jsonField {
	var out []jsonField
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag, hasTag := f.Tag.Lookup("json")
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && !hasTag && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name, f.Type, slices.Contains(strings.Split(opts, ","), "omitempty")})
	}
	return out
}

// props collects a schema's properties and required names, through allOf.
func (s spec) props(t *testing.T, schema map[string]any, props map[string]map[string]any, required map[string]bool) {
	t.Helper()
	schema = s.deref(t, schema)
	for _, part := range asList(schema["allOf"]) {
		pm, _ := part.(map[string]any)
		s.props(t, pm, props, required)
	}
	if _, ok := schema["properties"]; ok && schema["type"] != "object" {
		t.Errorf("schema with properties has type %v, want object", schema["type"])
	}
	for name, p := range mapAt(schema, "properties") {
		if _, dup := props[name]; dup {
			t.Errorf("property %q defined twice", name)
		}
		props[name], _ = p.(map[string]any)
	}
	for _, r := range asList(schema["required"]) {
		required[fmt.Sprint(r)] = true
	}
}

func asList(v any) []any { l, _ := v.([]any); return l }

func TestSpecSchemas(t *testing.T) {
	s := loadSpec(t)
	schemas := mapAt(s, "components", "schemas")
	var names []string
	for _, v := range specTypes {
		names = append(names, reflect.TypeOf(v).Name())
	}
	for name := range schemas {
		if !slices.Contains(names, name) {
			t.Errorf("schema %s matches no Go type", name)
		}
	}
	for _, v := range specTypes {
		typ := reflect.TypeOf(v)
		t.Run(typ.Name(), func(t *testing.T) {
			schema := mapAt(schemas, typ.Name())
			if schema == nil {
				t.Fatalf("no schema %s", typ.Name())
			}
			if d, _ := schema["description"].(string); d == "" {
				t.Errorf("schema without a description")
			}
			props, required := map[string]map[string]any{}, map[string]bool{}
			s.props(t, schema, props, required)
			fields := map[string]bool{}
			for _, f := range jsonFields(typ) {
				fields[f.name] = true
				p, ok := props[f.name]
				if !ok {
					t.Errorf("field %s (%s) is not a property", f.name, f.typ)
					continue
				}
				checkType(t, f.name, p, f.typ)
				if required[f.name] == f.omitempty {
					t.Errorf("field %s: required %v, want %v (omitempty %v)", f.name, required[f.name], !f.omitempty, f.omitempty)
				}
			}
			for name := range props {
				if !fields[name] {
					t.Errorf("property %s is no JSON field of %s", name, typ)
				}
			}
			for name := range required {
				if !fields[name] {
					t.Errorf("required %s is no JSON field of %s", name, typ)
				}
			}
		})
	}
}

// checkType checks a property's schema against the Go type it encodes.
func checkType(t *testing.T, where string, p map[string]any, typ reflect.Type) {
	t.Helper()
	want := func(typ, format string) {
		t.Helper()
		if p["type"] != typ || (p["format"] != nil || format != "") && p["format"] != format {
			t.Errorf("%s: type %v format %v, want %s %q", where, p["type"], p["format"], typ, format)
		}
	}
	unsigned := func(format string, hi float64) {
		t.Helper()
		want("integer", format)
		checkBounds(t, where, p, 0, hi, true, hi < math.MaxUint64)
	}
	switch {
	case typ.Kind() == reflect.Pointer: // an optional field; the schema describes the value
		checkType(t, where, p, typ.Elem())
		return
	case typ == reflect.TypeFor[time.Time]():
		want("string", "date-time")
		return
	case typ.Kind() == reflect.Struct:
		if p["$ref"] != "#/components/schemas/"+typ.Name() || len(p) != 1 {
			t.Errorf("%s: %v, want a $ref to %s", where, p, typ.Name())
		}
		return
	}
	switch typ.Kind() {
	case reflect.String:
		want("string", "")
	case reflect.Bool:
		want("boolean", "")
	case reflect.Int, reflect.Int64: // int is 64 bits on every platform sluice runs on
		want("integer", "int64")
	case reflect.Int32:
		want("integer", "int32")
	case reflect.Uint32:
		unsigned("uint32", math.MaxUint32)
	case reflect.Uint64:
		unsigned("uint64", math.MaxUint64)
	case reflect.Float64:
		want("number", "double")
	case reflect.Slice:
		want("array", "")
		items, _ := p["items"].(map[string]any)
		checkType(t, where+"[]", items, typ.Elem())
	case reflect.Map: // string keys: an object whose values are the map's
		want("object", "")
		vals, _ := p["additionalProperties"].(map[string]any)
		if typ.Key().Kind() != reflect.String {
			t.Errorf("%s: map keys of %s are not strings", where, typ)
		}
		checkType(t, where+"{}", vals, typ.Elem())
	default:
		t.Errorf("%s: no OpenAPI mapping for Go type %s; add one here", where, typ)
	}
}

// checkBounds checks that a property's minimum and maximum, where given, lie
// within the Go type's range [lo, hi] (a tighter range is the contract's
// business), and that the bounds needMin and needMax ask for are given.
func checkBounds(t *testing.T, where string, p map[string]any, lo, hi float64, needMin, needMax bool) {
	t.Helper()
	for _, b := range []struct {
		key  string
		need bool
	}{{"minimum", needMin}, {"maximum", needMax}} {
		v, ok := p[b.key].(string)
		if !ok {
			if b.need {
				t.Errorf("%s: no %s", where, b.key)
			}
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < lo || f > hi {
			t.Errorf("%s: %s %q outside the Go type's range [%v, %v]", where, b.key, v, lo, hi)
		}
	}
}

func TestSpecEnums(t *testing.T) {
	s := loadSpec(t)
	var channelStates []string
	for c := abi.ChannelState(0); c.String() != "unknown"; c++ {
		channelStates = append(channelStates, c.String())
	}
	for _, tc := range []struct {
		schema, prop string
		want         []string
	}{
		{"Error", "code", []string{CodeNotFound, CodeExists, CodeInvalid, CodeUnavailable, CodeInternal, CodeForbidden, CodeUnauthorized}},
		{"VM", "state", []string{StateWaiting, StateConnected}},
		{"ChannelStats", "state", channelStates},
		{"Version", "clock", []string{"wall", "virtual"}},
		{"PolicyState", "policy", []string{PolicyNone, PolicyDFQ, PolicyCap, PolicyTimeslice}},
		{"Stats", "policy", []string{PolicyNone, PolicyDFQ, PolicyCap, PolicyTimeslice}},
	} {
		t.Run(tc.schema+"."+tc.prop, func(t *testing.T) {
			var got []string
			for _, v := range asList(at(s, "components", "schemas", tc.schema, "properties", tc.prop, "enum")) {
				got = append(got, fmt.Sprint(v))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("enum %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSpecStrictRequest pins that the spec says what the server does:
// unknown fields in request bodies are refused.
func TestSpecStrictRequest(t *testing.T) {
	s := loadSpec(t)
	for _, name := range []string{"CreateVMRequest", "UpdateVMRequest", "PolicyState"} {
		if got := at(s, "components", "schemas", name, "additionalProperties"); got != "false" {
			t.Errorf("%s additionalProperties = %v, want false", name, got)
		}
	}
}
