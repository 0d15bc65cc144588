package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// do runs one request through the handler, without the socket and its
// credential check.
func do(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// decodeStrict decodes a JSON response body into a new value of want's
// type, refusing fields the type does not have.
func decodeStrict(t *testing.T, body []byte, want any) any {
	t.Helper()
	got := reflect.New(reflect.TypeOf(want))
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(got.Interface()); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	return got.Elem().Interface()
}

func TestRoutes(t *testing.T) {
	f := newFake()
	f.stats = sampleStats()
	h := Handler(f)
	vm := func(name string, weight uint32) hostapi.VM {
		return hostapi.VM{Name: name, ID: 1, Weight: weight, Channels: 4, RingEntries: 256, RegionSize: 4 << 20,
			HeapSize: 3 << 20, Endpoint: "/run/sluice/vms/" + name + ".sock", Vectors: 6, State: "waiting", Created: created}
	}
	vmC := vm("c", 1)
	vmC.ID, vmC.Cap, vmC.Memory, vmC.MaxCommandNs = 2, 0.5, 8<<30, 250e6
	// The steps share the fake's state, in order.
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		status       int
		want         any // decoded response body; nil for none
		call         string
	}{
		{"version", "GET", "/v1/version", "", 200, f.version, "Version"},
		{"list empty", "GET", "/v1/vms", "", 200, []hostapi.VM{}, "ListVMs"},
		{"create", "POST", "/v1/vms", `{"name":"a b","weight":2}`, 201, vm("a b", 2), "CreateVM {Name:a b Weight:2 Cap:0 Channels:0 RingEntries:0 RegionSize:0 Volume: NetNS: Cgroup: Memory:0 MaxCommandNs:0 Owner:}"},
		{"create all fields", "POST", "/v1/vms", `{"name":"c","weight":1,"cap":0.5,"channels":2,"ring_entries":64,"region_size":1048576,"memory":8589934592,"max_command_ns":250000000,"owner":"libvirt-qemu:kvm"}` + "\n",
			201, vmC, "CreateVM {Name:c Weight:1 Cap:0.5 Channels:2 RingEntries:64 RegionSize:1048576 Volume: NetNS: Cgroup: Memory:8589934592 MaxCommandNs:250000000 Owner:libvirt-qemu:kvm}"},
		{"list", "GET", "/v1/vms", "", 200, []hostapi.VM{vm("a b", 2), vmC}, "ListVMs"},
		{"get escaped name", "GET", "/v1/vms/a%20b", "", 200, vm("a b", 2), "GetVM a b"},
		{"update weight", "PATCH", "/v1/vms/a%20b", `{"weight":5}`, 200, vm("a b", 5), "UpdateVM a b weight=5 cap=-"},
		{"update cap", "PATCH", "/v1/vms/a%20b", `{"cap":0.25}`, 200,
			func() hostapi.VM { v := vm("a b", 5); v.Cap = 0.25; return v }(), "UpdateVM a b weight=- cap=0.25"},
		{"update both, cap cleared", "PATCH", "/v1/vms/a%20b", `{"weight":1000000,"cap":0}`, 200,
			vm("a b", 1000000), "UpdateVM a b weight=1000000 cap=0"},
		{"update null weight, cap 1", "PATCH", "/v1/vms/a%20b", `{"weight":null,"cap":1}`, 200,
			func() hostapi.VM { v := vm("a b", 1000000); v.Cap = 1; return v }(), "UpdateVM a b weight=- cap=1"},
		{"update memory", "PATCH", "/v1/vms/a%20b", `{"memory":1073741824}`, 200,
			func() hostapi.VM { v := vm("a b", 1000000); v.Cap, v.Memory = 1, 1<<30; return v }(), "UpdateVM a b weight=- cap=- memory=1073741824"},
		{"update memory cleared", "PATCH", "/v1/vms/a%20b", `{"memory":0}`, 200,
			func() hostapi.VM { v := vm("a b", 1000000); v.Cap = 1; return v }(), "UpdateVM a b weight=- cap=- memory=0"},
		{"update max command", "PATCH", "/v1/vms/a%20b", `{"max_command_ns":2000000}`, 200,
			func() hostapi.VM { v := vm("a b", 1000000); v.Cap, v.MaxCommandNs = 1, 2e6; return v }(), "UpdateVM a b weight=- cap=- max_command_ns=2000000"},
		{"update max command to the default", "PATCH", "/v1/vms/a%20b", `{"max_command_ns":0}`, 200,
			func() hostapi.VM { v := vm("a b", 1000000); v.Cap = 1; return v }(), "UpdateVM a b weight=- cap=- max_command_ns=0"},
		{"update missing vm", "PATCH", "/v1/vms/zz", `{"weight":1}`, 404,
			hostapi.Error{Code: hostapi.CodeNotFound, Message: `vm "zz": not found`}, "UpdateVM zz weight=1 cap=-"},
		{"get policy", "GET", "/v1/policy", "", 200, hostapi.PolicyState{Policy: "dfq", Accounting: "loga"}, "Policy"},
		{"set policy", "PUT", "/v1/policy", `{"policy":"cap"}`, 200,
			hostapi.PolicyState{Policy: "cap", Accounting: "loga"}, "SetPolicy {Policy:cap Accounting:}"},
		{"put back what get said", "PUT", "/v1/policy", `{"policy":"timeslice","accounting":"loga"}`, 200,
			hostapi.PolicyState{Policy: "timeslice", Accounting: "loga"}, "SetPolicy {Policy:timeslice Accounting:loga}"},
		{"accounting is the service's to refuse", "PUT", "/v1/policy", `{"policy":"none","accounting":"off"}`, 400,
			hostapi.Error{Code: hostapi.CodeInvalid, Message: "accounting is set at start: invalid request"},
			"SetPolicy {Policy:none Accounting:off}"},
		{"policy after", "GET", "/v1/policy", "", 200, hostapi.PolicyState{Policy: "timeslice", Accounting: "loga"}, "Policy"},
		{"usage", "GET", "/v1/vms/c/usage", "", 200, hostapi.Usage{Name: "c", Since: created}, "Usage c"},
		{"delete", "DELETE", "/v1/vms/c", "", 204, nil, "DeleteVM c"},
		{"usage outlives the vm", "GET", "/v1/vms/c/usage", "", 200, hostapi.Usage{Name: "c", Since: created}, "Usage c"},
		{"stats", "GET", "/v1/stats", "", 200, sampleStats(), "Stats"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.Calls())
			w := do(t, h, tc.method, tc.path, tc.body)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d; body %s", w.Code, tc.status, w.Body)
			}
			if calls := f.Calls()[before:]; !slices.Equal(calls, []string{tc.call}) {
				t.Errorf("service calls %q, want %q", calls, tc.call)
			}
			if tc.want == nil {
				if w.Body.Len() != 0 {
					t.Errorf("body %q, want none", w.Body)
				}
				return
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if got := decodeStrict(t, w.Body.Bytes(), tc.want); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("body\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestEmptyArrays pins that lists are [] and never null, whatever the
// service returns.
func TestEmptyArrays(t *testing.T) {
	f := newFake()
	f.stats = hostapi.Stats{Backend: "sim", Clock: "wall", VMs: []hostapi.VMStats{{VM: hostapi.VM{Name: "a"}}}}
	h := Handler(f)
	if w := do(t, h, "GET", "/v1/vms", ""); strings.TrimSpace(w.Body.String()) != "[]" {
		t.Errorf("GET /v1/vms with no vms: %s, want []", w.Body)
	}
	if w := do(t, h, "GET", "/v1/stats", ""); !strings.Contains(w.Body.String(), `"channel_stats":[]`) {
		t.Errorf("GET /v1/stats: %s, want channel_stats []", w.Body)
	}
	f.stats.VMs = nil
	if w := do(t, h, "GET", "/v1/stats", ""); !strings.Contains(w.Body.String(), `"vms":[]`) {
		t.Errorf("GET /v1/stats with no vms: %s, want vms []", w.Body)
	}
}

func TestErrorMapping(t *testing.T) {
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/version", ""},
		{"POST", "/v1/vms", `{"name":"a"}`},
		{"GET", "/v1/vms", ""},
		{"GET", "/v1/vms/a", ""},
		{"DELETE", "/v1/vms/a", ""},
		{"GET", "/v1/vms/a/usage", ""},
		{"GET", "/v1/stats", ""},
		{"GET", "/metrics", ""},
		{"PATCH", "/v1/vms/a", `{"cap":0.5}`},
		{"GET", "/v1/policy", ""},
		{"PUT", "/v1/policy", `{"policy":"none"}`},
	}
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("vm %q: %w", "a", hostapi.ErrNotFound), 404, hostapi.CodeNotFound},
		{fmt.Errorf("vm %q: %w", "a", hostapi.ErrExists), 409, hostapi.CodeExists},
		{fmt.Errorf("vm %q: %w: %w", "a", hostapi.ErrInvalid, errors.New("ring too small")), 400, hostapi.CodeInvalid},
		{fmt.Errorf("limit reached: %w", hostapi.ErrUnavailable), 503, hostapi.CodeUnavailable},
		{fmt.Errorf("writing state: %w", fs.ErrPermission), 500, hostapi.CodeInternal},
		{errors.New("not found"), 500, hostapi.CodeInternal}, // the text alone does not make a 404
	} {
		for _, r := range routes {
			t.Run(fmt.Sprintf("%s %s/%d", r.method, r.path, tc.status), func(t *testing.T) {
				f := newFake()
				f.fail = tc.err
				w := do(t, Handler(f), r.method, r.path, r.body)
				if w.Code != tc.status {
					t.Fatalf("status %d, want %d", w.Code, tc.status)
				}
				if ct := w.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
				got := decodeStrict(t, w.Body.Bytes(), hostapi.Error{})
				if want := (hostapi.Error{Code: tc.code, Message: tc.err.Error()}); got != want {
					t.Errorf("body %+v, want %+v", got, want)
				}
			})
		}
	}
}

func TestCreateVMBadBody(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"empty", ""},
		{"malformed", `{"name":`},
		{"not json", `name=a`},
		{"unknown field", `{"name":"a","gpus":2}`},
		{"misspelled field", `{"name":"a","ringEntries":64}`},
		{"wrong type", `{"name":5}`},
		{"negative unsigned", `{"name":"a","weight":-1}`},
		{"overflow", `{"name":"a","region_size":18446744073709551616}`},
		{"array", `[{"name":"a"}]`},
		{"two objects", `{"name":"a"}{"name":"b"}`},
		{"trailing garbage", `{"name":"a"} x`},
		{"too large", `{"name":"` + strings.Repeat("a", 2<<20) + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			w := do(t, Handler(f), "POST", "/v1/vms", tc.body)
			if w.Code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400; body %s", w.Code, w.Body)
			}
			if got := decodeStrict(t, w.Body.Bytes(), hostapi.Error{}).(hostapi.Error); got.Code != hostapi.CodeInvalid || got.Message == "" {
				t.Errorf("body %+v, want code invalid and a message", got)
			}
			if calls := f.Calls(); len(calls) != 0 {
				t.Errorf("service called with a bad body: %q", calls)
			}
		})
	}
}

// badBody checks a 400 with code invalid, a message containing want, and
// no call to the service.
func badBody(t *testing.T, f *fakeService, w *httptest.ResponseRecorder, want string) {
	t.Helper()
	if w.Code != http.StatusBadRequest {
		t.Fatalf("status %d, want 400; body %s", w.Code, w.Body)
	}
	got := decodeStrict(t, w.Body.Bytes(), hostapi.Error{}).(hostapi.Error)
	if got.Code != hostapi.CodeInvalid || !strings.Contains(got.Message, want) {
		t.Errorf("body %+v, want code invalid and a message with %q", got, want)
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Errorf("service called with a bad body: %q", calls)
	}
}

func TestUpdateVMBadBody(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"empty", "", "decoding request body"},
		{"nothing to change", `{}`, `vm "a": nothing to change`},
		{"nulls only", `{"weight":null,"cap":null}`, "nothing to change"},
		{"null", `null`, "nothing to change"},
		{"unknown field", `{"weight":2,"channels":4}`, `unknown field "channels"`},
		{"name in body", `{"name":"b","weight":2}`, `unknown field "name"`},
		{"syscall window negative", `{"syscall_window_ns":-1}`, "syscall_window_ns -1: want 0 to 1000000000"},
		{"syscall batch zero", `{"syscall_batch":0}`, "syscall_batch 0: want 1 to 1024"},
		{"syscall batch too large", `{"syscall_batch":1025}`, "syscall_batch 1025: want 1 to 1024"},
		{"max command too short", `{"max_command_ns":999999}`, "max_command_ns 999999: want 0 (the daemon's default) or 1000000 to 3600000000000"},
		{"max command too long", `{"max_command_ns":3600000000001}`, "max_command_ns 3600000000001"},
		{"max command negative", `{"max_command_ns":-1}`, "max_command_ns -1"},
		{"weight negative", `{"weight":-1}`, "decoding request body"},
		{"weight fraction", `{"weight":1.5}`, "decoding request body"},
		{"weight overflow", `{"weight":4294967296}`, "decoding request body"},
		{"cap negative", `{"cap":-0.1}`, "cap -0.1: want 0 (none) or a share in (0, 1]"},
		{"cap above one", `{"weight":2,"cap":1.0001}`, "cap 1.0001"},
		{"cap huge", `{"cap":1e400}`, "decoding request body"},
		{"cap string", `{"cap":"0.5"}`, "decoding request body"},
		{"two objects", `{"cap":0.5}{"cap":0.6}`, "data after the object"},
		{"array", `[{"cap":0.5}]`, "decoding request body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.vms["a"] = hostapi.VM{Name: "a", Weight: 1}
			badBody(t, f, do(t, Handler(f), "PATCH", "/v1/vms/a", tc.body), tc.want)
		})
	}
}

func TestSetPolicyBadBody(t *testing.T) {
	const list = "want one of none, dfq, cap, timeslice"
	for _, tc := range []struct{ name, body, want string }{
		{"empty", "", "decoding request body"},
		{"no policy", `{}`, `policy "": ` + list},
		{"accounting only", `{"accounting":"loga"}`, `policy "": ` + list},
		{"unknown policy", `{"policy":"fair"}`, `policy "fair": ` + list},
		{"upper case", `{"policy":"DFQ"}`, `policy "DFQ": ` + list},
		{"padded", `{"policy":" dfq"}`, `policy " dfq": ` + list},
		{"unknown field", `{"policy":"dfq","period_ns":5}`, `unknown field "period_ns"`},
		{"wrong type", `{"policy":1}`, "decoding request body"},
		{"bare string", `"dfq"`, "decoding request body"},
		{"trailing garbage", `{"policy":"dfq"},`, "data after the object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			badBody(t, f, do(t, Handler(f), "PUT", "/v1/policy", tc.body), tc.want)
		})
	}
}

func TestMuxFallbacks(t *testing.T) {
	h := Handler(newFake())
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"PUT", "/v1/vms", http.StatusMethodNotAllowed},
		{"POST", "/v1/vms/a", http.StatusMethodNotAllowed},
		{"GET", "/v1/nope", http.StatusNotFound},
		{"GET", "/v2/version", http.StatusNotFound},
		{"GET", "/v1/vms/a/b", http.StatusNotFound},
		{"POST", "/v1/policy", http.StatusMethodNotAllowed},
		{"PATCH", "/v1/policy", http.StatusMethodNotAllowed},
		{"PATCH", "/v1/vms", http.StatusMethodNotAllowed},
	} {
		if w := do(t, h, tc.method, tc.path, ""); w.Code != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, w.Code, tc.status)
		}
	}
}

const specPath = "../../../api/hostapi/openapi.yaml"

// specRoutes lists "METHOD /path" of every operation in openapi.yaml. It
// reads the paths section by indentation alone (paths at two spaces,
// methods at four), which is how the file is written; api/hostapi's tests
// parse the whole file.
func specRoutes(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in, path := false, ""
	for _, line := range strings.Split(string(b), "\n") {
		if line == "paths:" {
			in = true
			continue
		}
		if !in || strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if line[0] != ' ' {
			break // the next top-level key
		}
		key := strings.TrimSuffix(strings.TrimSpace(line), ":")
		switch indent := len(line) - len(strings.TrimLeft(line, " ")); {
		case indent == 2:
			path = key
		case indent == 4 && slices.Contains([]string{"get", "put", "post", "delete", "patch", "head", "options"}, key):
			out = append(out, strings.ToUpper(key)+" "+path)
		}
	}
	if len(out) < 8 {
		t.Fatalf("found only %d routes in %s: %q", len(out), specPath, out)
	}
	slices.Sort(out)
	return out
}

// muxPatterns lists the patterns the package's non-test files register.
func muxPatterns(t *testing.T) []string {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle") {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok {
				t.Errorf("%s with a pattern that is not a literal", sel.Sel.Name)
				return true
			}
			p, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
			return true
		})
	}
	slices.Sort(out)
	return out
}

// TestRoutesMatchSpec checks that the mux serves exactly the spec's routes,
// both as written in the source and as dispatched.
func TestRoutesMatchSpec(t *testing.T) {
	spec, mux := specRoutes(t), muxPatterns(t)
	if !slices.Equal(spec, mux) {
		t.Fatalf("routes in openapi.yaml:\n %q\nregistered on the mux:\n %q", spec, mux)
	}
	// Bodies the handlers pass on; routes not listed take any object.
	bodies := map[string]string{
		"PATCH /v1/vms/{name}": `{"weight":2}`,
		"PUT /v1/policy":       `{"policy":"dfq"}`,
	}
	for _, route := range spec {
		method, path, _ := strings.Cut(route, " ")
		f := newFake()
		f.fail = errors.New("reached the service")
		body, ok := bodies[route]
		if !ok {
			body = `{}`
		}
		w := do(t, Handler(f), method, strings.ReplaceAll(path, "{name}", "a"), body)
		if w.Code != http.StatusInternalServerError || len(f.Calls()) != 1 {
			t.Errorf("%s: status %d, calls %q: the mux did not dispatch it to the service", route, w.Code, f.Calls())
		}
	}
}

// FuzzCreateVMBody checks the server's request decoding: a body is either
// refused with 400 before the service sees it, or is exactly one
// CreateVMRequest that a strict decoder accepts, passed on as decoded.
func FuzzCreateVMBody(f *testing.F) {
	for _, s := range []string{
		`{"name":"a"}`, `{"name":"a","weight":2,"channels":4,"ring_entries":256,"region_size":4194304}`,
		`{"name":"a","x":1}`, `{"name":"a"} {}`, `null`, `{}`, `{"name":"\u00e9\ud800"}`, ` {"name":"a"} ` + "\n", `[`, "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		fake := newFake()
		w := do(t, Handler(fake), "POST", "/v1/vms", body)
		calls := fake.Calls()
		switch w.Code {
		case http.StatusBadRequest:
			if len(calls) > 0 && !strings.Contains(w.Body.String(), `"code":"invalid"`) || len(calls) == 0 && !strings.Contains(w.Body.String(), "decoding request body") {
				t.Fatalf("400 for %q: %s, calls %q", body, w.Body, calls)
			}
		case http.StatusCreated, http.StatusConflict:
		default:
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body)
		}
		if len(calls) == 0 {
			return
		}
		var req hostapi.CreateVMRequest
		dec := json.NewDecoder(strings.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			t.Fatalf("the service got %q from %q, which a strict decoder refuses: %v", calls, body, err)
		}
		if want := fmt.Sprintf("CreateVM %+v", req); !slices.Equal(calls, []string{want}) {
			t.Fatalf("service calls %q for %q, want %q", calls, body, want)
		}
	})
}

// strictly decodes body as the handlers do, or reports false.
func strictly(body string, v any) bool {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	return dec.Decode(v) == nil
}

// FuzzUpdateVMBody checks PATCH /v1/vms/{name}: a body reaches the service
// only if a strict decoder accepts it, it changes something and is in
// range, and then exactly as decoded.
func FuzzUpdateVMBody(f *testing.F) {
	for _, s := range []string{
		`{"weight":2}`, `{"cap":0.5}`, `{"weight":1,"cap":0}`, `{}`, `null`, `{"weight":0}`, `{"cap":-1}`,
		`{"cap":1e-320}`, `{"weight":2,"x":1}`, `{"weight":2} {}`, `{"WEIGHT":3}`, "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		fake := newFake()
		fake.vms["a"] = hostapi.VM{Name: "a", Weight: 1}
		w := do(t, Handler(fake), "PATCH", "/v1/vms/a", body)
		calls := fake.Calls()
		if w.Code != http.StatusOK && w.Code != http.StatusBadRequest {
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body)
		}
		if (w.Code == http.StatusOK) != (len(calls) == 1) {
			t.Fatalf("status %d for %q with calls %q", w.Code, body, calls)
		}
		if len(calls) == 0 {
			return
		}
		var req hostapi.UpdateVMRequest
		if !strictly(body, &req) || checkUpdate(req) != nil {
			t.Fatalf("the service got %q from %q, which is not a valid update", calls, body)
		}
		if want := "UpdateVM a " + updateString(req); calls[0] != want {
			t.Fatalf("service call %q for %q, want %q", calls[0], body, want)
		}
	})
}

// FuzzSetPolicyBody checks PUT /v1/policy: the service sees only one of
// the four policies, exactly as decoded.
func FuzzSetPolicyBody(f *testing.F) {
	for _, s := range []string{
		`{"policy":"dfq"}`, `{"policy":"cap","accounting":"loga"}`, `{"policy":"x"}`, `{}`, `{"policy":"none","y":0}`,
		`{"Policy":"timeslice"}`, `{"policy":"dfq"} x`, "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		fake := newFake()
		w := do(t, Handler(fake), "PUT", "/v1/policy", body)
		calls := fake.Calls()
		if w.Code != http.StatusOK && w.Code != http.StatusBadRequest {
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body)
		}
		if len(calls) == 0 {
			if w.Code != http.StatusBadRequest {
				t.Fatalf("status %d for %q without a service call", w.Code, body)
			}
			return
		}
		var st hostapi.PolicyState
		if !strictly(body, &st) || !slices.Contains(policies, st.Policy) {
			t.Fatalf("the service got %q from %q", calls, body)
		}
		if want := fmt.Sprintf("SetPolicy %+v", st); !slices.Equal(calls, []string{want}) {
			t.Fatalf("service calls %q for %q, want %q", calls, body, want)
		}
	})
}
