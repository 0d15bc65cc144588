package fleetagent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/api/hostapi"
)

// fakeDaemon is the daemon's VMs and ledger in memory.
type fakeDaemon struct {
	mu      sync.Mutex
	vms     map[string]hostapi.VM
	usage   map[string]hostapi.Usage
	creates int
}

func newFake() *fakeDaemon {
	return &fakeDaemon{vms: map[string]hostapi.VM{}, usage: map[string]hostapi.Usage{}}
}

func (f *fakeDaemon) CreateVM(_ context.Context, r hostapi.CreateVMRequest) (hostapi.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vms[r.Name]; ok {
		return hostapi.VM{}, hostapi.ErrExists
	}
	f.creates++
	v := hostapi.VM{Name: r.Name, Weight: r.Weight, Cap: r.Cap, Memory: r.Memory,
		Endpoint: "/run/sluice/vms/" + r.Name + ".sock", Vectors: 3, Channels: 2, RingEntries: 64, RegionSize: 1 << 20}
	f.vms[r.Name] = v
	return v, nil
}

func (f *fakeDaemon) UpdateVM(_ context.Context, name string, r hostapi.UpdateVMRequest) (hostapi.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vms[name]
	if !ok {
		return v, hostapi.ErrNotFound
	}
	if r.Weight != nil {
		v.Weight = *r.Weight
	}
	if r.Cap != nil {
		v.Cap = *r.Cap
	}
	if r.Memory != nil {
		v.Memory = *r.Memory
	}
	f.vms[name] = v
	return v, nil
}

func (f *fakeDaemon) DeleteVM(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vms[name]; !ok {
		return hostapi.ErrNotFound
	}
	delete(f.vms, name)
	return nil
}

func (f *fakeDaemon) ListVMs(context.Context) ([]hostapi.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []hostapi.VM
	for _, v := range f.vms {
		out = append(out, v)
	}
	return out, nil
}

// Usage outlives the VM, as the daemon's ledger does.
func (f *fakeDaemon) CommittedUsage(_ context.Context, name string) (hostapi.Usage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.usage[name]
	if _, live := f.vms[name]; !ok && !live {
		return u, hostapi.ErrNotFound
	}
	return u, nil
}

func (f *fakeDaemon) run(name string, ns uint64) {
	f.mu.Lock()
	u := f.usage[name]
	u.GPUNs += ns
	u.Kernels++
	f.usage[name] = u
	f.mu.Unlock()
}

// fakeController is the controller's side of the agent's conversation:
// registration, heartbeats answering the desired VMs, and idempotent usage
// ingestion keyed by host, VM and sequence number, as the real one does
// (its own tests cover it; mediator/ cannot import controller/internal).
type fakeController struct {
	t     *testing.T
	url   string
	token string

	mu        sync.Mutex
	down      bool
	hosts     map[string]controllerapi.RegisterHostRequest
	desired   map[string]controllerapi.VM
	intervals map[string]controllerapi.UsageInterval // by vm/seq
	dups      int
	endpoints map[string]controllerapi.EndpointReport // by host
}

func newWorld(t *testing.T) *fakeController {
	w := &fakeController{t: t, token: "slc_host", hosts: map[string]controllerapi.RegisterHostRequest{},
		desired: map[string]controllerapi.VM{}, intervals: map[string]controllerapi.UsageInterval{},
		endpoints: map[string]controllerapi.EndpointReport{}}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/hosts/{name}", func(rw http.ResponseWriter, r *http.Request) {
		var req controllerapi.RegisterHostRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(rw, err.Error(), 400)
			return
		}
		w.hosts[r.PathValue("name")] = req
		writeJSON(rw, controllerapi.Host{Name: r.PathValue("name"), State: controllerapi.Up})
	})
	mux.HandleFunc("POST /v1/hosts/{name}/heartbeat", func(rw http.ResponseWriter, r *http.Request) {
		if _, ok := w.hosts[r.PathValue("name")]; !ok {
			rw.WriteHeader(404)
			writeJSON(rw, controllerapi.Error{Code: controllerapi.NotFound, Message: "no such host"})
			return
		}
		ds := controllerapi.DesiredState{Vms: []controllerapi.VM{}}
		for _, v := range w.desired {
			ds.Vms = append(ds.Vms, v)
		}
		writeJSON(rw, ds)
	})
	mux.HandleFunc("PUT /v1/hosts/{name}/endpoints", func(rw http.ResponseWriter, r *http.Request) {
		var rep controllerapi.EndpointReport
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
			http.Error(rw, err.Error(), 400)
			return
		}
		w.endpoints[r.PathValue("name")] = rep
		rw.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/usage", func(rw http.ResponseWriter, r *http.Request) {
		var req controllerapi.IngestUsageRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Host != "h1" {
			http.Error(rw, "bad request", 400)
			return
		}
		var rep controllerapi.IngestReport
		for _, in := range req.Intervals {
			key := fmt.Sprintf("%s/%d", in.Vm, in.Seq)
			if old, ok := w.intervals[key]; ok {
				if old.GpuNs != in.GpuNs || !old.End.Equal(in.End) {
					rw.WriteHeader(409)
					writeJSON(rw, controllerapi.Error{Code: controllerapi.Conflict, Message: key})
					return
				}
				rep.Duplicates++
				continue
			}
			w.intervals[key] = in
			rep.Accepted++
		}
		w.dups += rep.Duplicates
		writeJSON(rw, rep)
	})
	hs := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.down {
			http.Error(rw, "down", http.StatusServiceUnavailable)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+w.token {
			rw.WriteHeader(401)
			return
		}
		mux.ServeHTTP(rw, r)
	}))
	t.Cleanup(hs.Close)
	w.url = hs.URL
	return w
}

func writeJSON(rw http.ResponseWriter, v any) {
	rw.Header().Set("Content-Type", "application/json")
	json.NewEncoder(rw).Encode(v)
}

func (w *fakeController) setDown(d bool) { w.mu.Lock(); w.down = d; w.mu.Unlock() }

func (w *fakeController) want(v controllerapi.VM) {
	w.mu.Lock()
	v.Host = "h1"
	w.desired[v.Name] = v
	w.mu.Unlock()
}

func (w *fakeController) unwant(name string) { w.mu.Lock(); delete(w.desired, name); w.mu.Unlock() }

func (w *fakeController) agent(local Local, statePath string) *Agent {
	a, err := New(Config{Controller: w.url, Token: w.token, Host: "h1", Address: "h1:7071", Version: "test",
		GPUs:      []controllerapi.GPUReport{{Index: 0, Model: "sim", MemoryBytes: 8 << 30}},
		StatePath: statePath, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, local)
	if err != nil {
		w.t.Fatal(err)
	}
	return a
}

func (w *fakeController) total(vm string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, in := range w.intervals {
		if in.Vm == vm {
			n += in.GpuNs
		}
	}
	return n
}

func TestAgentAppliesTheControllersVMs(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := newFake()
	d.vms["local"] = hostapi.VM{Name: "local", Weight: 1, Endpoint: "/run/sluice/vms/local.sock", Vectors: 3} // not the controller's
	a := w.agent(d, filepath.Join(t.TempDir(), "agent.json"))
	if err := a.Register(ctx); err != nil {
		t.Fatal(err)
	}
	w.want(controllerapi.VM{Name: "web", Tenant: "acme", Weight: 1, MemoryBytes: 1 << 30, Generation: 1})
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if v := d.vms["web"]; v.Weight != 1 || v.Memory != 1<<30 {
		t.Fatalf("created on the host: %+v", v)
	}
	// Its endpoint is reported, the local VM's is not.
	if rep := w.endpoints["h1"]; len(rep.Vms) != 1 || rep.Vms[0].Vm != "web" || rep.Vms[0].Endpoint != "/run/sluice/vms/web.sock" ||
		rep.Vms[0].Vectors != 3 || *rep.Vms[0].Channels != 2 || *rep.Vms[0].RegionSize != 1<<20 || rep.Vms[0].Volume != nil {
		t.Fatalf("endpoints reported: %+v", rep)
	}
	// A change at run time is applied in place, not by recreating the VM.
	w.want(controllerapi.VM{Name: "web", Tenant: "acme", Weight: 3, Cap: 0.5, MemoryBytes: 1 << 30, Generation: 2})
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if v := d.vms["web"]; v.Weight != 3 || v.Cap != 0.5 || d.creates != 1 {
		t.Fatalf("after the change: %+v, %d creates", v, d.creates)
	}
	// Deleted at the controller: deleted on the host; the local VM stays.
	w.unwant("web")
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.vms["web"]; ok {
		t.Fatal("web still on the host")
	}
	if _, ok := d.vms["local"]; !ok {
		t.Fatal("the agent deleted a VM that is not the controller's")
	}
	if rep := w.endpoints["h1"]; rep.Vms == nil || len(rep.Vms) != 0 {
		t.Fatalf("endpoints after the delete: %+v", rep)
	}
	// The host registered its inventory.
	if h := w.hosts["h1"]; len(h.Gpus) != 1 || h.Gpus[0].MemoryBytes != 8<<30 || h.Address != "h1:7071" {
		t.Fatalf("registration %+v", h)
	}
}

func TestAgentUsageIsCountedOnceThroughFailuresAndRestarts(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := newFake()
	statePath := filepath.Join(t.TempDir(), "agent.json")
	a := w.agent(d, statePath)
	if err := a.Register(ctx); err != nil {
		t.Fatal(err)
	}
	w.want(controllerapi.VM{Name: "web", Tenant: "acme", Weight: 1, Generation: 1})
	if err := a.Sync(ctx); err != nil { // creates web, baseline 0
		t.Fatal(err)
	}
	d.run("web", 1000)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.total("web"); got != 1000 {
		t.Fatalf("after one interval: %d ns", got)
	}
	// The controller is unreachable: the interval waits on disk.
	d.run("web", 200)
	w.setDown(true)
	if err := a.Sync(ctx); err == nil {
		t.Fatal("sync with the controller down succeeded")
	}
	// sluiced restarts (a new agent on the same state) and the controller
	// is back: the waiting interval arrives, once.
	w.setDown(false)
	a = w.agent(d, statePath)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.total("web"); got != 1200 {
		t.Fatalf("after the outage: %d ns, want 1200", got)
	}
	// The controller stored an interval but its answer was lost: the agent
	// (restarted from the state saved before the push) sends it again with
	// the same number, and it counts once.
	d.run("web", 30)
	if err := a.pushUsageSavedOnly(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(statePath, before, 0o600); err != nil {
		t.Fatal(err)
	}
	a = w.agent(d, statePath)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.total("web"); got != 1230 || w.dups != 1 {
		t.Fatalf("after a lost acknowledgement: %d ns, %d duplicates; want 1230, 1", got, w.dups)
	}
	// A counter that goes backwards is a new baseline, not negative usage.
	d.mu.Lock()
	d.usage["web"] = hostapi.Usage{GPUNs: 5}
	d.mu.Unlock()
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	d.run("web", 10)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.total("web"); got != 1240 {
		t.Fatalf("after a counter reset: %d ns, want 1240", got)
	}
}

// pushUsageSavedOnly takes readings into pending intervals and saves them
// without sending: the state a crash between saving and sending leaves.
func (a *Agent) pushUsageSavedOnly(ctx context.Context) error {
	ctl := a.api
	defer func() { a.api = ctl }()
	a.api, _ = controllerapi.NewClientWithResponses("http://127.0.0.1:1", controllerapi.WithHTTPClient(&http.Client{Timeout: time.Second}))
	if err := a.pushUsage(ctx); err == nil {
		return fmt.Errorf("push to a closed port succeeded")
	}
	return nil
}
