package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/controller/internal/auth"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
	"github.com/sluice-gpu/sluice/controller/internal/store/sqlite"
)

// FuzzAPI sends arbitrary requests (method, path, query, body) with an
// operator's and a tenant's token to a controller with a host and a VM: no
// request may fail with 500, and every error answer is the API's Error with
// a known code.
func FuzzAPI(f *testing.F) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(f.TempDir(), "c.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	secrets := map[bool]string{}
	for _, op := range []bool{true, false} {
		secret, id, _ := auth.NewSecret()
		tok := fleet.Token{ID: id, Name: "fuzz", Role: fleet.RoleTenant, Tenant: "acme", Hash: auth.Hash(secret), Created: time.Now()}
		if op {
			tok.Role, tok.Tenant = fleet.RoleOperator, ""
		}
		if err := st.CreateToken(ctx, tok, fleet.Event{Time: time.Now(), Action: "token.create"}); err != nil {
			f.Fatal(err)
		}
		secrets[op] = secret
	}
	srv, err := New(Config{Store: st, Log: discardLog()})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	do := func(method, target, body, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "http://c"+target, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := do("PUT", "/v1/hosts/h1", `{"address":"a","gpus":[{"index":0,"model":"m","memory_bytes":1073741824}]}`, secrets[true]); rec.Code != 200 {
		f.Fatalf("register: %d %s", rec.Code, rec.Body)
	}
	if rec := do("POST", "/v1/vms", `{"name":"web","tenant":"acme"}`, secrets[true]); rec.Code != 201 {
		f.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	for _, c := range calls {
		f.Add(uint8(0), strings.Fields(c.route)[0], c.path, c.body)
		f.Add(uint8(1), strings.Fields(c.route)[0], c.path, c.body)
	}
	f.Add(uint8(0), "GET", "/v1/usage?from=2026-01-01T00:00:00Z&to=2025-01-01T00:00:00Z&vm=%00", "")
	f.Add(uint8(0), "POST", "/v1/usage", `{"host":"h1","intervals":[{"vm":"web","seq":9223372036854775807,"start":"0001-01-01T00:00:00Z","end":"9999-12-31T23:59:59Z","gpu_ns":9223372036854775807}]}`)
	methods := []string{"GET", "POST", "PUT", "PATCH", "DELETE"}
	f.Fuzz(func(t *testing.T, who uint8, method, target, body string) {
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \t\r\n#") {
			return // not a request line httptest.NewRequest accepts
		}
		if !slices.Contains(methods, method) {
			method = methods[int(who/2)%len(methods)]
		}
		var rec *httptest.ResponseRecorder
		func() {
			defer func() {
				if r := recover(); r != nil {
					rec = nil // a target NewRequest rejects
				}
			}()
			rec = do(method, target, body, secrets[who%2 == 0])
		}()
		if rec == nil {
			return
		}
		if rec.Code == http.StatusInternalServerError {
			t.Fatalf("%s %s %q: 500 %s", method, target, body, rec.Body)
		}
		if rec.Code >= 400 {
			b, _ := io.ReadAll(rec.Body)
			var e controllerapi.Error
			if err := json.Unmarshal(b, &e); err != nil || !e.Code.Valid() || e.Message == "" {
				t.Fatalf("%s %s %q: %d with body %q, not an Error", method, target, body, rec.Code, b)
			}
		}
	})
}
