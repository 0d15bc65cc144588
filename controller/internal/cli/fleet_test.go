package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/controller/internal/auth"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
	"github.com/sluice-gpu/sluice/controller/internal/server"
	"github.com/sluice-gpu/sluice/controller/internal/store/sqlite"
)

// controller is an in-process sluice-controller with an operator token and
// host h1 (two 8 GiB GPUs) registered.
type controller struct {
	url, op string
	api     *controllerapi.ClientWithResponses
}

func startController(t *testing.T) controller {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	secret, id, _ := auth.NewSecret()
	if err := st.CreateToken(ctx, fleet.Token{ID: id, Name: "ops", Role: fleet.RoleOperator, Hash: auth.Hash(secret), Created: time.Now()},
		fleet.Event{Time: time.Now(), Actor: "test", Action: "token.create", Target: id}); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Store: st, Version: "ctl-test", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	c := controller{url: hs.URL, op: secret}
	c.api = c.client(t, secret)
	res, err := c.api.RegisterHostWithResponse(ctx, "h1", controllerapi.RegisterHostRequest{Address: "h1:7071",
		Gpus: []controllerapi.GPUReport{{Index: 0, Model: "H100", MemoryBytes: 8 << 30}, {Index: 1, Model: "H100", MemoryBytes: 8 << 30}}})
	if err != nil || res.StatusCode() != 200 {
		t.Fatalf("registering h1: %v %s", err, res.Body)
	}
	return c
}

func (c controller) client(t *testing.T, token string) *controllerapi.ClientWithResponses {
	cl, err := controllerapi.NewClientWithResponses(c.url, controllerapi.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// ctl runs sluicectl against c with token.
func (c controller) ctl(token string, args ...string) result {
	return runCLI(context.Background(), nil, false, append([]string{"--controller", c.url, "--token", token}, args...)...)
}

func mustOK(t *testing.T, r result, what string) string {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s: exit %d\nstdout %s\nstderr %s", what, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func TestFleetEndToEnd(t *testing.T) {
	c := startController(t)
	// An operator makes a tenant token; its secret alone is on stdout.
	alice := strings.TrimSpace(mustOK(t, c.ctl(c.op, "token", "create", "alice", "--role", "tenant", "--tenant", "acme"), "token create"))
	if !strings.HasPrefix(alice, "slc_") || strings.Contains(alice, "\n") {
		t.Fatalf("token create printed %q", alice)
	}
	out := mustOK(t, c.ctl(alice, "whoami"), "whoami")
	if !strings.Contains(out, "alice") || !strings.Contains(out, "acme") || !strings.Contains(out, "ctl-test") {
		t.Fatalf("whoami:\n%s", out)
	}
	// The tenant creates, lists, changes its VM.
	out = mustOK(t, c.ctl(alice, "vm", "create", "web", "--tenant", "acme", "--weight", "2", "--memory", "1GiB", "--placement", "pack"), "vm create")
	if !strings.Contains(out, "Host:        h1") || !strings.Contains(out, "Memory:      1GiB") || !strings.Contains(out, "Weight:      2") {
		t.Fatalf("vm create:\n%s", out)
	}
	out = mustOK(t, c.ctl(alice, "vm", "set", "web", "--cap", "25%", "--memory", "none"), "vm set")
	if !strings.Contains(out, "Cap:         25%") || !strings.Contains(out, "Memory:      -") || !strings.Contains(out, "Generation:  2") {
		t.Fatalf("vm set:\n%s", out)
	}
	out = mustOK(t, c.ctl(alice, "vm", "list"), "vm list")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME  TENANT  HOST  GPU") ||
		!strings.HasPrefix(lines[1], "web   acme    h1") {
		t.Fatalf("vm list:\n%s", out)
	}
	var vms []controllerapi.VM
	if err := json.Unmarshal([]byte(mustOK(t, c.ctl(alice, "vm", "list", "--json"), "vm list --json")), &vms); err != nil || len(vms) != 1 || vms[0].Cap != 0.25 {
		t.Fatalf("vm list --json: %+v %v", vms, err)
	}
	// The tenant may not see hosts: exit 1 with the controller's reason.
	r := c.ctl(alice, "host", "list")
	if r.code != ExitError || !strings.Contains(r.stderr, "forbidden") {
		t.Fatalf("host list as a tenant: %+v", r)
	}
	out = mustOK(t, c.ctl(c.op, "host", "list"), "host list")
	if !strings.Contains(out, "h1    up") {
		t.Fatalf("host list:\n%s", out)
	}
	out = mustOK(t, c.ctl(c.op, "gpu", "list"), "gpu list")
	if !strings.Contains(out, "h1      0  H100     8GiB       -    1") {
		t.Fatalf("gpu list:\n%s", out)
	}
	mustOK(t, c.ctl(c.op, "host", "get", "h1"), "host get")
	out = mustOK(t, c.ctl(c.op, "vm", "move", "web"), "vm move")
	if !strings.Contains(out, "GPU:         1") {
		t.Fatalf("vm move:\n%s", out)
	}
	// h1 pushes usage; the tenant reads it as a table, JSON and CSV.
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	k := int64(3)
	res, err := c.api.IngestUsageWithResponse(context.Background(), controllerapi.IngestUsageRequest{Host: "h1", Intervals: []controllerapi.UsageInterval{
		{Vm: "web", Seq: 1, Start: t0, End: t0.Add(time.Minute), GpuNs: 1500000, Kernels: &k},
		{Vm: "web", Seq: 2, Start: t0.Add(time.Minute), End: t0.Add(2 * time.Minute), GpuNs: 500000, Kernels: &k},
	}})
	if err != nil || res.StatusCode() != 200 {
		t.Fatalf("ingest: %v %s", err, res.Body)
	}
	out = mustOK(t, c.ctl(alice, "usage", "--from", "2026-11-01", "--to", "2026-11-02"), "usage")
	if !strings.Contains(out, "TOTAL") || !strings.Contains(out, "2ms") || !strings.Contains(out, "2 intervals, 2000000 ns") {
		t.Fatalf("usage:\n%s", out)
	}
	var rep controllerapi.UsageReport
	if err := json.Unmarshal([]byte(mustOK(t, c.ctl(alice, "usage", "--vm", "web", "--json"), "usage --json")), &rep); err != nil || rep.TotalGpuNs != 2000000 {
		t.Fatalf("usage --json: %+v %v", rep, err)
	}
	rows, err := csv.NewReader(strings.NewReader(mustOK(t, c.ctl(alice, "usage", "--tenant", "acme", "--csv"), "usage --csv"))).ReadAll()
	if err != nil || len(rows) != 3 || rows[0][0] != "host" || rows[2][6] != "500000" {
		t.Fatalf("usage --csv: %v %v", rows, err)
	}
	if r := c.ctl(alice, "usage", "--tenant", "other"); r.code != ExitError || !strings.Contains(r.stderr, "forbidden") || !strings.Contains(r.stderr, `not "other"'s`) {
		t.Fatalf("usage of another tenant: %+v", r)
	}
	if r := c.ctl(alice, "usage", "--from", "yesterday-ish"); r.code != ExitUsage {
		t.Fatalf("bad --from: %+v", r)
	}
	// The audit log names who did what.
	out = mustOK(t, c.ctl(c.op, "events", "--limit", "3"), "events")
	if !strings.Contains(out, "vm.move") || !strings.Contains(out, "vm.update") || !strings.Contains(out, "alice (token") {
		t.Fatalf("events:\n%s", out)
	}
	// Revoking alice's token locks her out.
	var toks []controllerapi.Token
	json.Unmarshal([]byte(mustOK(t, c.ctl(c.op, "token", "list", "--json"), "token list")), &toks)
	var id string
	for _, tk := range toks {
		if tk.Name == "alice" {
			id = tk.Id
		}
	}
	mustOK(t, c.ctl(c.op, "token", "revoke", id), "token revoke")
	if r := c.ctl(alice, "whoami"); r.code != ExitError || !strings.Contains(r.stderr, "unauthenticated") {
		t.Fatalf("whoami after revocation: %+v", r)
	}
	out = mustOK(t, c.ctl(c.op, "token", "list"), "token list")
	if !strings.Contains(out, "tenant acme") || strings.Contains(out, alice) {
		t.Fatalf("token list:\n%s", out)
	}
	mustOK(t, c.ctl(c.op, "vm", "delete", "web"), "vm delete")
	if r := c.ctl(c.op, "vm", "get", "web"); r.code != ExitError || !strings.Contains(r.stderr, `vm "web": not found`) {
		t.Fatalf("vm get after delete: %+v", r)
	}
}

func TestFleetConnectionSources(t *testing.T) {
	c := startController(t)
	// The config file.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluicectl.yaml")
	if err := os.WriteFile(cfg, []byte("controller: "+c.url+"\ntoken: "+c.op+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(context.Background(), nil, false, "--config", cfg, "whoami"); r.code != 0 || !strings.Contains(r.stdout, "operator") {
		t.Fatalf("--config: %+v", r)
	}
	// The default config path under XDG_CONFIG_HOME.
	os.MkdirAll(filepath.Join(dir, "sluice"), 0o700)
	os.Rename(cfg, filepath.Join(dir, "sluice", "sluicectl.yaml"))
	if r := runCLI(context.Background(), map[string]string{"XDG_CONFIG_HOME": dir}, false, "whoami"); r.code != 0 {
		t.Fatalf("default config: %+v", r)
	}
	// The environment wins over the file; a flag over the environment.
	env := map[string]string{"XDG_CONFIG_HOME": dir, TokenEnv: "slc_wrong"}
	if r := runCLI(context.Background(), env, false, "whoami"); r.code != ExitError || !strings.Contains(r.stderr, "unknown token") {
		t.Fatalf("env token: %+v", r)
	}
	if r := runCLI(context.Background(), env, false, "--token", c.op, "whoami"); r.code != 0 {
		t.Fatalf("flag token: %+v", r)
	}
	// A config file with an unknown key, or missing when named, is an error.
	os.WriteFile(cfg, []byte("controler: x\n"), 0o600)
	if r := runCLI(context.Background(), nil, false, "--config", cfg, "whoami"); r.code == 0 || !strings.Contains(r.stderr, "controler") {
		t.Fatalf("typo in config: %+v", r)
	}
	if r := runCLI(context.Background(), nil, false, "--config", filepath.Join(dir, "nope.yaml"), "whoami"); r.code == 0 {
		t.Fatalf("missing config: %+v", r)
	}
	// An endless one is refused, not read until memory runs out.
	if r := runCLI(context.Background(), nil, false, "--config", "/dev/zero", "whoami"); r.code == 0 || !strings.Contains(r.stderr, "/dev/zero is larger than 1024 KiB") {
		t.Fatalf("--config /dev/zero: %+v", r)
	}
}

func TestFleetFlagsNeedTheRightTarget(t *testing.T) {
	c := startController(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"vm", "create", "web", "--tenant", "acme"}, "needs a controller"},
		{[]string{"vm", "list", "--tenant", "acme"}, "needs a controller"},
		{[]string{"host", "list"}, "--controller URL"},
		{[]string{"--controller", c.url, "host", "list"}, "no token"},
		{[]string{"--controller", c.url, "--token", c.op, "vm", "create", "web", "--tenant", "acme", "--channels", "2"}, "sluiced's"},
		{[]string{"--controller", c.url, "--token", c.op, "vm", "create", "web"}, "--tenant is required"},
		{[]string{"--controller", c.url, "--token", c.op, "vm", "set", "web", "--syscall-batch", "4"}, "sluiced's"},
		{[]string{"--controller", c.url, "--token", c.op, "usage", "--csv", "--json"}, "exclude"},
	} {
		r := runCLI(context.Background(), nil, false, tc.args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// TestFleetTop: top with a controller shows the hosts and each VM's rates
// over the last --window of the usage its host reported, prorating an
// interval the window cuts; a tenant sees its VMs without the hosts.
func TestFleetTop(t *testing.T) {
	c := startController(t)
	mustOK(t, c.ctl(c.op, "vm", "create", "web", "--tenant", "acme"), "vm create")
	mustOK(t, c.ctl(c.op, "vm", "create", "idle", "--tenant", "acme"), "vm create")
	end := time.Now().Truncate(time.Second)
	k := int64(600)
	// 60 s of reports for web: 30 s at 50% of a GPU, then 30 s at 10%; a
	// 30 s window sees the 10% stretch only.
	res, err := c.api.IngestUsageWithResponse(context.Background(), controllerapi.IngestUsageRequest{Host: "h1", Intervals: []controllerapi.UsageInterval{
		{Vm: "web", Seq: 1, Start: end.Add(-60 * time.Second), End: end.Add(-30 * time.Second), GpuNs: int64(15 * time.Second), Kernels: &k},
		{Vm: "web", Seq: 2, Start: end.Add(-30 * time.Second), End: end, GpuNs: int64(3 * time.Second), Kernels: &k},
	}})
	if err != nil || res.StatusCode() != 200 {
		t.Fatalf("ingest: %v %s", err, res.Body)
	}
	out := mustOK(t, c.ctl(c.op, "top", "--once", "--window", "30s"), "top")
	if !strings.Contains(out, "2 VMs") || !strings.Contains(out, "HOST  STATE") || !strings.Contains(out, "h1    up") {
		t.Fatalf("top's header and hosts:\n%s", out)
	}
	web, idle := "", ""
	for _, l := range strings.Split(out, "\n") {
		switch f := strings.Fields(l); {
		case len(f) > 0 && f[0] == "web":
			web = l
		case len(f) > 0 && f[0] == "idle":
			idle = l
		}
	}
	if f := strings.Fields(web); len(f) < 10 || f[6] != "10.0" || f[7] != "3s" || f[8] != "20.0" {
		t.Fatalf("web's line %q: want GPU%% 10.0, GPU TIME 3s, KERNELS/S 20.0 over 30s", web)
	}
	if f := strings.Fields(idle); len(f) < 10 || f[6] != "-" {
		t.Fatalf("idle's line %q: want no rates", idle)
	}
	// 90 s: the whole 60 s reported (18 s of GPU time) over 90 s.
	out = mustOK(t, c.ctl(c.op, "top", "--once", "--window", "90s"), "top")
	if !strings.Contains(out, "20.0  18s") {
		t.Fatalf("top --window 90s:\n%s", out)
	}
	alice := strings.TrimSpace(mustOK(t, c.ctl(c.op, "token", "create", "alice", "--role", "tenant", "--tenant", "acme"), "token create"))
	out = mustOK(t, c.ctl(alice, "top", "--once"), "top as a tenant")
	if strings.Contains(out, "HOST  STATE") || !strings.Contains(out, "web") {
		t.Fatalf("top as a tenant:\n%s", out)
	}
	if r := c.ctl(c.op, "top", "--once", "--window", "0s"); r.code != ExitUsage {
		t.Fatalf("--window 0s: %+v", r)
	}
}
