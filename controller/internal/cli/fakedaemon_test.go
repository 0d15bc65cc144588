package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// fakeDaemon serves the documented host API routes with fake data.
type fakeDaemon struct {
	mu      sync.Mutex
	vms     map[string]hostapi.VM
	usage   map[string]hostapi.Usage
	stats   []hostapi.Stats // served in order; the last one repeats
	nStats  int
	onStats func(n int) // called after the n-th (1-based) stats request is answered
	created []hostapi.CreateVMRequest
	updates []string // "name weight=W cap=C", "-" for an absent field
	policy  hostapi.PolicyState
	setTo   []hostapi.PolicyState
}

var (
	t0 = time.Date(2026, 5, 9, 12, 0, 0, 0, time.UTC)

	vmWeb = hostapi.VM{Name: "web", ID: 1, Weight: 2, Channels: 4, RingEntries: 256,
		RegionSize: 4 << 20, HeapSize: 3 << 20, Memory: 8 << 30, MemoryUsed: 1536 << 20,
		InflightBudgetNs: 3_250_000, InflightNs: 2_000_000, EstimateNs: 100_000, BudgetStalls: 1, Endpoint: "/run/sluice/vms/web.sock",
		Vectors: 5, State: hostapi.StateConnected, Peers: 1, Created: t0}
	vmBatch = hostapi.VM{Name: "batch", ID: 12, Weight: 1, Cap: 0.25, Channels: 8, RingEntries: 512,
		RegionSize: 64 << 20, HeapSize: 60 << 20, Endpoint: "/run/sluice/vms/batch.sock",
		Vectors: 9, State: hostapi.StateWaiting, Created: t0.Add(time.Minute)}
	usageWeb = hostapi.Usage{Name: "web", GPUNs: 1234567890, Kernels: 420, Commands: 1000,
		Errors: 3, Since: t0}
)

func newFakeDaemon() *fakeDaemon {
	return &fakeDaemon{
		vms:    map[string]hostapi.VM{"web": vmWeb, "batch": vmBatch},
		usage:  map[string]hostapi.Usage{"web": usageWeb, "batch": {Name: "batch", Since: t0}},
		policy: hostapi.PolicyState{Policy: hostapi.PolicyDFQ, Accounting: "loga"},
	}
}

// serve starts f on a UNIX socket in a temporary directory and returns the
// socket's path. The server is shut down when the test ends.
func (f *fakeDaemon) serve(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "d.sock")
	if len(path) > 100 { // sun_path is 108 bytes
		dir, err := os.MkdirTemp("/tmp", "sl")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		path = filepath.Join(dir, "d.sock")
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f.mux()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return path
}

func (f *fakeDaemon) mux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /v1/version", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, hostapi.Version{Version: "0.3.0", ABIMajor: 1, ABIMinor: 0,
			Backend: "fake", Clock: "virtual", Epoch: 7})
	})
	m.HandleFunc("POST /v1/vms", f.create)
	m.HandleFunc("GET /v1/vms", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		vms := make([]hostapi.VM, 0, len(f.vms))
		for _, vm := range f.vms {
			vms = append(vms, vm)
		}
		sort.Slice(vms, func(i, j int) bool { return vms[i].Name < vms[j].Name })
		reply(w, http.StatusOK, vms)
	})
	m.HandleFunc("GET /v1/vms/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if vm, ok := f.vms[r.PathValue("name")]; ok {
			reply(w, http.StatusOK, vm)
			return
		}
		replyErr(w, fmt.Errorf("no vm %q: %w", r.PathValue("name"), hostapi.ErrNotFound))
	})
	m.HandleFunc("DELETE /v1/vms/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.vms[r.PathValue("name")]; !ok {
			replyErr(w, fmt.Errorf("no vm %q: %w", r.PathValue("name"), hostapi.ErrNotFound))
			return
		}
		delete(f.vms, r.PathValue("name"))
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("GET /v1/vms/{name}/usage", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.PathValue("name") == "flaky" {
			replyErr(w, fmt.Errorf("accounting store busy: %w", hostapi.ErrUnavailable))
			return
		}
		if u, ok := f.usage[r.PathValue("name")]; ok {
			reply(w, http.StatusOK, u)
			return
		}
		replyErr(w, fmt.Errorf("no vm %q: %w", r.PathValue("name"), hostapi.ErrNotFound))
	})
	m.HandleFunc("GET /v1/stats", f.serveStats)
	m.HandleFunc("PATCH /v1/vms/{name}", f.update)
	m.HandleFunc("GET /v1/policy", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		reply(w, http.StatusOK, f.policy)
	})
	m.HandleFunc("PUT /v1/policy", f.setPolicy)
	return m
}

// strictDecode decodes a request body as sluiced does: unknown fields are
// refused, so the tests catch the CLI sending one.
func strictDecode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding request body: %v: %w", err, hostapi.ErrInvalid)
	}
	return nil
}

func (f *fakeDaemon) update(w http.ResponseWriter, r *http.Request) {
	var req hostapi.UpdateVMRequest
	if err := strictDecode(r, &req); err != nil {
		replyErr(w, err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("name")
	wt, c := "-", "-"
	if req.Weight != nil {
		wt = fmt.Sprint(*req.Weight)
	}
	if req.Cap != nil {
		c = fmt.Sprint(*req.Cap)
	}
	up := name + " weight=" + wt + " cap=" + c
	if req.Memory != nil {
		up += fmt.Sprint(" memory=", *req.Memory)
	}
	if req.MaxCommandNs != nil {
		up += fmt.Sprint(" max_command_ns=", *req.MaxCommandNs)
	}
	if req.Owner != nil {
		up += fmt.Sprintf(" owner=%q", *req.Owner)
	}
	f.updates = append(f.updates, up)
	vm, ok := f.vms[name]
	switch {
	case !ok:
		replyErr(w, fmt.Errorf("vm %q: %w", name, hostapi.ErrNotFound))
		return
	case req.Weight != nil && hostapi.CheckWeight(*req.Weight) != nil: // as the daemon
		replyErr(w, fmt.Errorf("vm %q: %w", name, hostapi.CheckWeight(*req.Weight)))
		return
	}
	if req.Weight != nil {
		vm.Weight = *req.Weight
	}
	if req.Cap != nil {
		vm.Cap = *req.Cap
	}
	if req.Memory != nil {
		vm.Memory = *req.Memory
	}
	if req.MaxCommandNs != nil {
		vm.MaxCommandNs = *req.MaxCommandNs
		if vm.MaxCommandNs == 0 {
			vm.MaxCommandNs = 500e6 // the daemon's default
		}
	}
	f.vms[name] = vm
	reply(w, http.StatusOK, vm)
}

func (f *fakeDaemon) setPolicy(w http.ResponseWriter, r *http.Request) {
	var st hostapi.PolicyState
	if err := strictDecode(r, &st); err != nil {
		replyErr(w, err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setTo = append(f.setTo, st)
	if st.Policy == hostapi.PolicyTimeslice && f.policy.Accounting == "off" {
		replyErr(w, fmt.Errorf("policy %q needs accounting: %w", st.Policy, hostapi.ErrInvalid))
		return
	}
	f.policy.Policy = st.Policy
	reply(w, http.StatusOK, f.policy)
}

func (f *fakeDaemon) create(w http.ResponseWriter, r *http.Request) {
	var req hostapi.CreateVMRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		replyErr(w, fmt.Errorf("decoding: %v: %w", err, hostapi.ErrInvalid))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, req)
	if _, ok := f.vms[req.Name]; ok {
		replyErr(w, fmt.Errorf("vm %q exists: %w", req.Name, hostapi.ErrExists))
		return
	}
	if req.Name == "named" {
		replyErr(w, fmt.Errorf("vm %q: name reserved: %w", req.Name, hostapi.ErrInvalid))
		return
	}
	if err := hostapi.CheckWeight(max(req.Weight, 1)); err != nil { // as the daemon: 0 is the default, 1
		replyErr(w, fmt.Errorf("vm %q: %w", req.Name, err))
		return
	}
	if req.RegionSize != 0 && req.RegionSize&(req.RegionSize-1) != 0 {
		replyErr(w, fmt.Errorf("region size %d is not a power of two: %w", req.RegionSize, hostapi.ErrInvalid))
		return
	}
	vm := hostapi.VM{Name: req.Name, ID: uint32(100 + len(f.created)), Weight: req.Weight,
		Channels: req.Channels, RingEntries: req.RingEntries, RegionSize: req.RegionSize,
		Endpoint: "/run/sluice/vms/" + req.Name + ".sock", Vectors: 5,
		State: hostapi.StateWaiting, Created: t0}
	f.vms[req.Name] = vm
	reply(w, http.StatusCreated, vm)
}

func (f *fakeDaemon) serveStats(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	if len(f.stats) == 0 {
		f.mu.Unlock()
		replyErr(w, errors.New("no stats configured"))
		return
	}
	s := f.stats[min(f.nStats, len(f.stats)-1)]
	f.nStats++
	n, hook := f.nStats, f.onStats
	f.mu.Unlock()
	reply(w, http.StatusOK, s)
	if hook != nil {
		hook(n)
	}
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func replyErr(w http.ResponseWriter, err error) {
	status, code := hostapi.StatusOf(err)
	reply(w, status, hostapi.Error{Code: code, Message: err.Error()})
}
