package daemon

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/mediator/internal/apiserver"
)

// TestWeightRange: creating a VM and changing its weight take the same
// range, 1 to 1000000, and refuse a weight past it with the same error,
// through the host API.
func TestWeightRange(t *testing.T) {
	h := apiserver.Handler(newDaemon(t, "virtual", t.TempDir()))
	do := func(method, path, body string) (int, string) {
		t.Helper()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
		return w.Code, w.Body.String()
	}
	refused := func(method, path, body, vm string, weight string) {
		t.Helper()
		code, out := do(method, path, body)
		var e hostapi.Error
		_ = json.Unmarshal([]byte(out), &e)
		want := `vm "` + vm + `": weight ` + weight + `: want 1 to 1000000: invalid request`
		if code != http.StatusBadRequest || e.Code != hostapi.CodeInvalid || e.Message != want {
			t.Errorf("%s %s %s: %d %s; want 400 %q", method, path, body, code, out, want)
		}
	}
	refused("POST", "/v1/vms", `{"name":"big","weight":1000001}`, "big", "1000001")
	refused("POST", "/v1/vms", `{"name":"big","weight":4294967295}`, "big", "4294967295")
	if code, out := do("POST", "/v1/vms", `{"name":"a","weight":1000000}`); code != http.StatusCreated {
		t.Fatalf("create with weight 1000000: %d %s", code, out)
	}
	if code, out := do("POST", "/v1/vms", `{"name":"b","weight":0}`); code != http.StatusCreated || !strings.Contains(out, `"weight":1,`) {
		t.Fatalf("create with weight 0 (the default, 1): %d %s", code, out)
	}
	refused("PATCH", "/v1/vms/a", `{"weight":1000001}`, "a", "1000001")
	refused("PATCH", "/v1/vms/a", `{"weight":0}`, "a", "0")
	if code, out := do("PATCH", "/v1/vms/a", `{"weight":7}`); code != http.StatusOK || !strings.Contains(out, `"weight":7,`) {
		t.Fatalf("set weight 7: %d %s", code, out)
	}
}

// A VM persisted with a weight past the range (before it was one) is
// restored with the most, not refused with the daemon.
func TestRestoreClampsWeight(t *testing.T) {
	state := t.TempDir()
	list := `{"version":1,"vms":[{"name":"old","weight":4000000000}]}`
	if err := os.WriteFile(filepath.Join(state, "vms.json"), []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, "virtual", state)
	if vm, err := d.GetVM(t.Context(), "old"); err != nil || vm.Weight != hostapi.MaxWeight {
		t.Fatalf("restored: %+v, %v; want weight %d", vm, err, hostapi.MaxWeight)
	}
}
