package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/controllerapi"
)

// host drain, undrain and delete: a table by default, JSON with --json; a
// delete refused while a VM is on the host says why.
func TestFleetHostDrainAndDelete(t *testing.T) {
	c := startController(t)
	mustOK(t, c.ctl(c.op, "vm", "create", "web", "--tenant", "acme"), "vm create")
	out := mustOK(t, c.ctl(c.op, "host", "drain", "h1"), "host drain")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "h1    up,draining") {
		t.Fatalf("host drain:\n%s", out)
	}
	if out := mustOK(t, c.ctl(c.op, "host", "list"), "host list"); !strings.Contains(out, "h1    up,draining") {
		t.Fatalf("host list:\n%s", out)
	}
	r := c.ctl(c.op, "vm", "create", "db", "--tenant", "acme")
	if r.code != ExitError || !strings.Contains(r.stderr, "no_capacity") {
		t.Fatalf("vm create with the only host draining: %+v", r)
	}
	r = c.ctl(c.op, "host", "delete", "h1")
	if r.code != ExitError || !strings.Contains(r.stderr, `deleting host "h1": conflict: host "h1" holds 1 VM(s), web: move or delete them first`) {
		t.Fatalf("host delete with a VM: %+v", r)
	}
	var h controllerapi.Host
	if err := json.Unmarshal([]byte(mustOK(t, c.ctl(c.op, "host", "undrain", "h1", "--json"), "host undrain --json")), &h); err != nil || h.Draining || h.Vms != 1 {
		t.Fatalf("host undrain --json: %+v, %v", h, err)
	}
	mustOK(t, c.ctl(c.op, "vm", "delete", "web"), "vm delete")
	if out := mustOK(t, c.ctl(c.op, "host", "delete", "h1"), "host delete"); out != "host \"h1\" deleted\n" {
		t.Fatalf("host delete: %q", out)
	}
	if r := c.ctl(c.op, "host", "get", "h1"); r.code != ExitError || !strings.Contains(r.stderr, "not_found") {
		t.Fatalf("host get after the delete: %+v", r)
	}
}
