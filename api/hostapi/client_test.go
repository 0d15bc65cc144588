package hostapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serveUnix serves h on a UNIX socket in a temporary directory and returns
// a client for it; both are torn down when the test ends.
func serveUnix(t testing.TB, h http.Handler) *Client {
	t.Helper()
	path := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	c := NewClient(path)
	t.Cleanup(func() {
		c.hc.CloseIdleConnections()
		_ = srv.Close()
		<-done
	})
	return c
}

func testContext(t *testing.T) context.Context {
	// A deadlock guard only, far above what any call here takes.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestClientRoutes checks that every client method sends a route of the
// spec, and that together they cover every route but /metrics.
func TestClientRoutes(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Method+" "+r.URL.EscapedPath())
		mu.Unlock()
		switch {
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/v1/vms" && r.Method == http.MethodGet:
			_, _ = io.WriteString(w, "[]")
		default:
			_, _ = io.WriteString(w, "{}")
		}
	}))
	ctx := testContext(t)
	const name = "a b/c" // escaping must keep it one path segment
	calls := []func() error{
		func() error { _, err := c.Version(ctx); return err },
		func() error { _, err := c.CreateVM(ctx, CreateVMRequest{Name: name}); return err },
		func() error { _, err := c.ListVMs(ctx); return err },
		func() error { _, err := c.GetVM(ctx, name); return err },
		func() error { return c.DeleteVM(ctx, name) },
		func() error { _, err := c.Usage(ctx, name); return err },
		func() error { _, err := c.Stats(ctx); return err },
		func() error { _, err := c.UpdateVM(ctx, name, UpdateVMRequest{Weight: new(uint32(2))}); return err },
		func() error { _, err := c.Policy(ctx); return err },
		func() error { _, err := c.SetPolicy(ctx, PolicyCap); return err },
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}

	var routes []*regexp.Regexp
	var names []string
	covered := map[string]bool{}
	for op := range loadSpec(t).ops() {
		re := regexp.QuoteMeta(op)
		re = strings.ReplaceAll(re, `\{name\}`, `[^/]+`)
		routes = append(routes, regexp.MustCompile("^"+re+"$"))
		names = append(names, op)
	}
	for _, s := range sent {
		matched := false
		for i, re := range routes {
			if re.MatchString(s) {
				matched, covered[names[i]] = true, true
			}
		}
		if !matched {
			t.Errorf("client sent %q, which is not in openapi.yaml", s)
		}
		if strings.Contains(s, "/v1/vms/") && !strings.Contains(s, "/a%20b%2Fc") {
			t.Errorf("client sent %q: name not path-escaped", s)
		}
	}
	for _, n := range names {
		if !covered[n] && n != "GET /metrics" {
			t.Errorf("no client method for %s", n)
		}
	}
}

func TestClientRequestBody(t *testing.T) {
	type got struct{ ctype, body string }
	ch := make(chan got, 1)
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- got{r.Header.Get("Content-Type"), string(b)}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"name":"a","id":7,"created":"2024-05-06T07:08:09.5Z"}`)
	}))
	vm, err := c.CreateVM(testContext(t), CreateVMRequest{Name: "a", Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	g := <-ch
	if g.ctype != "application/json" || g.body != `{"name":"a","channels":2}` {
		t.Errorf("request %q %q, want application/json with zero fields left out", g.ctype, g.body)
	}
	want := VM{Name: "a", ID: 7, Created: time.Date(2024, 5, 6, 7, 8, 9, 5e8, time.UTC)}
	if vm != want {
		t.Errorf("CreateVM = %+v, want %+v", vm, want)
	}
}

// TestClientSchedulingBodies pins what the scheduling calls send: absent
// fields left out, a zero cap sent (it clears the cap), and only the policy
// name for SetPolicy, since accounting is read only.
func TestClientSchedulingBodies(t *testing.T) {
	type got struct{ method, path, ctype, body string }
	ch := make(chan got, 1)
	var mu sync.Mutex
	answer := ""
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- got{r.Method, r.URL.EscapedPath(), r.Header.Get("Content-Type"), string(b)}
		mu.Lock()
		defer mu.Unlock()
		_, _ = io.WriteString(w, answer)
	}))
	ctx := testContext(t)
	for _, tc := range []struct {
		name   string
		answer string
		call   func() (any, error)
		sent   got
		want   any
	}{
		{"weight only", `{"name":"a","weight":3,"cap":0.25}`,
			func() (any, error) { return c.UpdateVM(ctx, "a", UpdateVMRequest{Weight: new(uint32(3))}) },
			got{"PATCH", "/v1/vms/a", "application/json", `{"weight":3}`}, VM{Name: "a", Weight: 3, Cap: 0.25}},
		{"clear cap", `{"name":"a","weight":1}`,
			func() (any, error) { return c.UpdateVM(ctx, "a", UpdateVMRequest{Cap: new(0.0)}) },
			got{"PATCH", "/v1/vms/a", "application/json", `{"cap":0}`}, VM{Name: "a", Weight: 1}},
		{"both", `{"name":"a","weight":7,"cap":0.5}`,
			func() (any, error) {
				return c.UpdateVM(ctx, "a", UpdateVMRequest{Weight: new(uint32(7)), Cap: new(0.5)})
			},
			got{"PATCH", "/v1/vms/a", "application/json", `{"weight":7,"cap":0.5}`}, VM{Name: "a", Weight: 7, Cap: 0.5}},
		{"get policy", `{"policy":"dfq","accounting":"loga"}`,
			func() (any, error) { return c.Policy(ctx) },
			got{"GET", "/v1/policy", "", ""}, PolicyState{Policy: PolicyDFQ, Accounting: "loga"}},
		{"set policy", `{"policy":"timeslice","accounting":"off"}`,
			func() (any, error) { return c.SetPolicy(ctx, PolicyTimeslice) },
			got{"PUT", "/v1/policy", "application/json", `{"policy":"timeslice"}`}, PolicyState{Policy: PolicyTimeslice, Accounting: "off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			answer = tc.answer
			mu.Unlock()
			v, err := tc.call()
			if err != nil {
				t.Fatal(err)
			}
			if g := <-ch; g != tc.sent {
				t.Errorf("sent %+v, want %+v", g, tc.sent)
			}
			if v != tc.want {
				t.Errorf("got %+v, want %+v", v, tc.want)
			}
		})
	}
}

func TestClientErrors(t *testing.T) {
	sentinels := []error{ErrNotFound, ErrExists, ErrInvalid, ErrUnavailable}
	for _, tc := range []struct {
		name    string
		status  int
		body    string
		want    error // nil: none of the sentinels
		code    string
		message string
	}{
		{"not found", 404, `{"code":"not_found","error":"vm \"x\": not found"}`, ErrNotFound, CodeNotFound, `vm "x": not found`},
		{"exists", 409, `{"code":"exists","error":"vm \"x\": already exists"}`, ErrExists, CodeExists, `vm "x": already exists`},
		{"invalid", 400, `{"code":"invalid","error":"bad"}`, ErrInvalid, CodeInvalid, "bad"},
		{"unavailable", 503, `{"code":"unavailable","error":"full"}`, ErrUnavailable, CodeUnavailable, "full"},
		{"internal", 500, `{"code":"internal","error":"disk on fire"}`, nil, CodeInternal, "disk on fire"},
		{"forbidden", 403, `{"code":"forbidden","error":"permission denied"}`, nil, CodeForbidden, "permission denied"},
		{"unknown code", 418, `{"code":"teapot","error":"short and stout"}`, nil, "teapot", "short and stout"},
		{"plain text", 404, "404 page not found\n", nil, "", "Not Found"},
		{"no message", 500, `{"code":"internal"}`, nil, CodeInternal, "Internal Server Error"},
		{"redirect", 304, ``, nil, "", "Not Modified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			_, err := c.GetVM(testContext(t), "x")
			var re *RemoteError
			if !errors.As(err, &re) {
				t.Fatalf("GetVM error %#v, want a *RemoteError", err)
			}
			if re.Status != tc.status || re.Code != tc.code || err.Error() != tc.message {
				t.Errorf("got %d %q %q, want %d %q %q", re.Status, re.Code, err.Error(), tc.status, tc.code, tc.message)
			}
			for _, s := range sentinels {
				if errors.Is(err, s) != (s == tc.want) {
					t.Errorf("errors.Is(err, %v) = %v", s, !(s == tc.want))
				}
			}
		})
	}
}

func TestClientUnavailable(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "nobody.sock"))
	_, err := c.Version(testContext(t))
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Version on a missing socket: %v, want ErrUnavailable wrapping ENOENT", err)
	}
	var re *RemoteError
	if errors.As(err, &re) {
		t.Errorf("a transport error came back as a RemoteError")
	}
}

func TestClientBadResponse(t *testing.T) {
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"name": 3}`)
	}))
	_, err := c.GetVM(testContext(t), "x")
	if err == nil || !strings.Contains(err.Error(), "decoding response to GET /v1/vms/x") {
		t.Fatalf("GetVM on a bad body: %v, want a decoding error", err)
	}
	for _, s := range []error{ErrNotFound, ErrExists, ErrInvalid, ErrUnavailable} {
		if errors.Is(err, s) {
			t.Errorf("a decoding error is %v", s)
		}
	}
}

func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("vm %q: %w", "a", ErrNotFound), 404, CodeNotFound},
		{fmt.Errorf("x: %w", ErrExists), 409, CodeExists},
		{fmt.Errorf("x: %w: %w", ErrInvalid, errors.New("layout")), 400, CodeInvalid},
		{ErrUnavailable, 503, CodeUnavailable},
		{errors.New("not found"), 500, CodeInternal}, // same text, not the sentinel
		{nil, 500, CodeInternal},
	} {
		status, code := StatusOf(tc.err)
		if status != tc.status || code != tc.code {
			t.Errorf("StatusOf(%v) = %d %q, want %d %q", tc.err, status, code, tc.status, tc.code)
		}
		if tc.status != 500 {
			if s := sentinelOf(code); !errors.Is(tc.err, s) {
				t.Errorf("sentinelOf(%q) = %v, want the sentinel of %v", code, s, tc.err)
			}
		}
	}
	for _, code := range []string{CodeInternal, CodeForbidden, "", "x"} {
		if s := sentinelOf(code); s != nil {
			t.Errorf("sentinelOf(%q) = %v, want nil", code, s)
		}
	}
}

// FuzzClientResponse feeds the client arbitrary responses: it must return a
// value or an error, never panic, and a non-2xx status is always a
// RemoteError with a message.
func FuzzClientResponse(f *testing.F) {
	f.Add(200, `{"name":"a","id":1}`)
	f.Add(404, `{"code":"not_found","error":"gone"}`)
	f.Add(500, `{"code":5,"error":[]}`)
	f.Add(409, `{"code":"exists"}`)
	f.Add(200, `[`)
	f.Add(503, "\xff\xfe")
	var mu sync.Mutex
	var status int
	var body string
	c := serveUnix(f, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		st, b := status, body
		mu.Unlock()
		w.WriteHeader(st)
		_, _ = io.WriteString(w, b)
	}))
	f.Fuzz(func(t *testing.T, st int, b string) {
		if st < 200 || st > 599 || st == 204 || st == 304 {
			t.Skip("not a status a handler can send with a body")
		}
		mu.Lock()
		status, body = st, b
		mu.Unlock()
		_, err := c.GetVM(context.Background(), "a")
		if st/100 == 2 {
			return
		}
		var re *RemoteError
		if !errors.As(err, &re) || re.Status != st || err.Error() == "" {
			t.Fatalf("status %d body %q: %v, want a RemoteError with a message", st, b, err)
		}
	})
}
