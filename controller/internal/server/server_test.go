package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/controller/internal/auth"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
	"github.com/sluice-gpu/sluice/controller/internal/store/sqlite"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// env is a controller on a temporary database with one token of each kind.
type env struct {
	t      *testing.T
	dbPath string
	store  *sqlite.Store
	srv    *Server
	http   *httptest.Server
	clock  *clock
	// secrets
	op, acme, other, h1, revoked string
}

const gib = int64(1) << 30

func newEnv(t *testing.T) *env {
	e := &env{t: t, dbPath: filepath.Join(t.TempDir(), "controller.db"),
		clock: &clock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}}
	e.start()
	ctx := context.Background()
	mk := func(name string, role fleet.Role, tenant, host string) string {
		secret, id, err := auth.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		tok := fleet.Token{ID: id, Name: name, Role: role, Tenant: tenant, Host: host, Hash: auth.Hash(secret), Created: e.clock.Now()}
		if err := e.store.CreateToken(ctx, tok, fleet.Event{Time: e.clock.Now(), Actor: "test", Action: "token.create", Target: id}); err != nil {
			t.Fatal(err)
		}
		return secret
	}
	e.op = mk("ops", fleet.RoleOperator, "", "")
	e.acme = mk("acme-bot", fleet.RoleTenant, "acme", "")
	e.other = mk("other-bot", fleet.RoleTenant, "other", "")
	e.h1 = mk("h1-sluiced", fleet.RoleHost, "", "h1")
	e.revoked = mk("old", fleet.RoleOperator, "", "")
	tok, _ := e.store.TokenByHash(ctx, auth.Hash(e.revoked))
	if err := e.store.RevokeToken(ctx, tok.ID, e.clock.Now(), fleet.Event{Action: "token.revoke"}); err != nil {
		t.Fatal(err)
	}
	return e
}

// start opens the database and serves it; stop closes both (a restart).
func (e *env) start() {
	st, err := sqlite.Open(context.Background(), e.dbPath)
	if err != nil {
		e.t.Fatal(err)
	}
	srv, err := New(Config{Store: st, Clock: e.clock.Now, HeartbeatTimeout: 30 * time.Second, MaxVMsPerGPU: 4, Version: "test",
		Log: discardLog()})
	if err != nil {
		e.t.Fatal(err)
	}
	e.store, e.srv, e.http = st, srv, httptest.NewServer(srv.Handler())
	e.t.Cleanup(e.stop)
}

func (e *env) stop() {
	if e.http != nil {
		e.http.Close()
		e.store.Close()
		e.http = nil
	}
}

type resp struct {
	status int
	body   []byte
}

func (r resp) apiError(t *testing.T) controllerapi.Error {
	t.Helper()
	var e controllerapi.Error
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return e
}

func (r resp) field() string {
	var e controllerapi.Error
	json.Unmarshal(r.body, &e)
	if e.Field == nil {
		return ""
	}
	return *e.Field
}

func (e *env) do(method, path, token, body string) resp {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.http.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, b}
}

// must does a request that must answer want, and decodes its body into v.
func (e *env) must(want int, method, path, token, body string, v any) {
	e.t.Helper()
	r := e.do(method, path, token, body)
	if r.status != want {
		e.t.Fatalf("%s %s: %d %s, want %d", method, path, r.status, r.body, want)
	}
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			e.t.Fatalf("%s %s: decoding %q: %v", method, path, r.body, err)
		}
	}
}

// registerHost registers a host with GPUs of the given sizes.
func (e *env) registerHost(name string, mem ...int64) {
	e.t.Helper()
	var gpus []string
	for i, m := range mem {
		gpus = append(gpus, `{"index":`+itoa(int64(i))+`,"model":"sim","memory_bytes":`+itoa(m)+`}`)
	}
	e.must(200, "PUT", "/v1/hosts/"+name, e.op, `{"address":"`+name+`:7071","gpus":[`+strings.Join(gpus, ",")+`]}`, nil)
}

func (e *env) createVM(token, body string) controllerapi.VM {
	e.t.Helper()
	var vm controllerapi.VM
	e.must(201, "POST", "/v1/vms", token, body, &vm)
	return vm
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
