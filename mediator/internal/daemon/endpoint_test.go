package daemon

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/internal/sockfile"
	"github.com/sluice-gpu/sluice/mediator/internal/apiserver"
)

// TestEndpointPathTooLong: a VM whose endpoint socket path would not fit in
// a UNIX socket address is refused with 400 and a message that says so (it
// was a 500 with bind's EINVAL); a daemon whose paths leave no room refuses
// to start.
func TestEndpointPathTooLong(t *testing.T) {
	base := t.TempDir()
	cfg := DefaultConfig()
	cfg.Socket = filepath.Join(base, "s.sock")
	cfg.StateDir = filepath.Join(base, "state")
	cfg.Clock = "virtual"
	cfg.Proxy.Binary = "off"
	// Room for "short.sock", not for a name of 40 letters.
	pad := sockfile.MaxPath - len(base) - len("/e/") - len("/short.sock") - 10
	if pad < 1 {
		t.Skipf("temp dir %s too long for the test", base)
	}
	cfg.EndpointDir = filepath.Join(base, "e", strings.Repeat("d", pad))
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	h := apiserver.Handler(d)
	post := func(name string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/vms", strings.NewReader(`{"name":"`+name+`"}`)))
		return w.Code, w.Body.String()
	}
	if code, out := post("short"); code != http.StatusCreated {
		t.Fatalf("a name that fits: %d %s", code, out)
	}
	long := strings.Repeat("l", 40)
	code, out := post(long)
	if code != http.StatusBadRequest || !strings.Contains(out, "more than the 107 a UNIX socket path may have") ||
		!strings.Contains(out, "shorter name") {
		t.Fatalf("a name past the socket path limit: %d %s; want 400 saying why", code, out)
	}

	bad := cfg
	bad.EndpointDir = filepath.Join(base, strings.Repeat("d", sockfile.MaxPath))
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "leaves no room") {
		t.Errorf("an endpoint dir past the limit: %v", err)
	}
	bad = cfg
	bad.Socket = filepath.Join(base, strings.Repeat("s", sockfile.MaxPath)+".sock")
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "host API's socket path") {
		t.Errorf("a host API socket past the limit: %v", err)
	}
}
