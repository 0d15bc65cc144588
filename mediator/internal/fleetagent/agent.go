// Package fleetagent is sluiced's side of sluice-controller: it registers
// the host and its GPU inventory, heartbeats, applies the VMs the
// controller places on the host (create, change weight/cap/memory at run
// time, delete), pushes the VMs' usage as numbered intervals and reports
// their endpoints (for the controller's libvirt XML).
//
// Usage delivery is at least once and idempotent on the controller's side:
// each interval has a sequence number per VM; the agent writes an interval
// to its state file before it sends it and forgets it only once the
// controller acknowledged it, so an interval lost to a crash, a restart or
// a network error is sent again with the same number and content, and the
// controller counts it once. A VM's first reading is its baseline (a VM
// created again under an old name continues that name's ledger record,
// which belongs to nobody here); a counter found lower than the last
// reading is taken as the new baseline, never as negative usage.
//
// The agent manages the VMs the controller assigned to it (it remembers
// them in its state file); VMs created on the host by other means are left
// alone.
package fleetagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/api/hostapi"
)

// Local is what the agent needs of the daemon (the host API's service).
type Local interface {
	CreateVM(ctx context.Context, req hostapi.CreateVMRequest) (hostapi.VM, error)
	UpdateVM(ctx context.Context, name string, req hostapi.UpdateVMRequest) (hostapi.VM, error)
	DeleteVM(ctx context.Context, name string) error
	ListVMs(ctx context.Context) ([]hostapi.VM, error)
	// CommittedUsage is a VM's usage as far as a crash of the daemon
	// cannot take it back (its usage journal): what the agent pushes, so
	// that the controller never holds GPU time the host loses in a kill -9
	// and counters never go back.
	CommittedUsage(ctx context.Context, name string) (hostapi.Usage, error)
}

// Config configures an Agent.
type Config struct {
	Controller string // the controller's base URL
	Token      string // a host token for Host
	Host       string // this host's name at the controller
	Address    string // where operators reach this host (informational)
	Version    string // sluiced's version
	GPUs       []controllerapi.GPUReport
	StatePath  string        // the agent's state file (managed VMs, usage readings, unacknowledged intervals)
	Interval   time.Duration // between syncs; default 10s
	Clock      func() time.Time
	HTTPClient *http.Client
	Log        *slog.Logger
}

// Agent syncs one host with the controller.
type Agent struct {
	cfg   Config
	local Local
	api   *controllerapi.ClientWithResponses
	st    state
}

// state is what survives restarts, in Config.StatePath.
type state struct {
	Managed map[string]bool               `json:"managed"`
	VMs     map[string]reading            `json:"vms"`
	Pending []controllerapi.UsageInterval `json:"pending"`
	Applied map[string]int64              `json:"applied"` // generation applied per VM
}

// reading is a VM's last usage reading and its next sequence number.
type reading struct {
	Seq     int64     `json:"seq"` // the last sequence number used
	GPUNs   uint64    `json:"gpu_ns"`
	Kernels uint64    `json:"kernels"`
	At      time.Time `json:"at"`
}

// New returns an agent with the state at cfg.StatePath (empty when there
// is none yet).
func New(cfg Config, local Local) (*Agent, error) {
	if cfg.Controller == "" || cfg.Token == "" || cfg.Host == "" || cfg.StatePath == "" {
		return nil, errors.New("fleetagent: controller, token, host and state path are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	token := cfg.Token
	api, err := controllerapi.NewClientWithResponses(strings.TrimRight(cfg.Controller, "/"),
		controllerapi.WithHTTPClient(cfg.HTTPClient),
		controllerapi.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("fleetagent: %w", err)
	}
	a := &Agent{cfg: cfg, local: local, api: api}
	if err := a.load(); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Agent) load() error {
	a.st = state{Managed: map[string]bool{}, VMs: map[string]reading{}, Applied: map[string]int64{}}
	b, err := os.ReadFile(a.cfg.StatePath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the agent state: %w", err)
	}
	if err := json.Unmarshal(b, &a.st); err != nil {
		return fmt.Errorf("reading the agent state %s: %w", a.cfg.StatePath, err)
	}
	if a.st.Managed == nil {
		a.st.Managed = map[string]bool{}
	}
	if a.st.VMs == nil {
		a.st.VMs = map[string]reading{}
	}
	if a.st.Applied == nil {
		a.st.Applied = map[string]int64{}
	}
	return nil
}

// save writes the state atomically: a temporary file, fsync, rename.
func (a *Agent) save() error {
	b, err := json.Marshal(a.st)
	if err != nil {
		return fmt.Errorf("encoding the agent state: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(a.cfg.StatePath), ".fleetagent-*")
	if err != nil {
		return fmt.Errorf("writing the agent state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the agent state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the agent state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the agent state: %w", err)
	}
	if err := os.Rename(tmp.Name(), a.cfg.StatePath); err != nil {
		return fmt.Errorf("writing the agent state: %w", err)
	}
	return nil
}

// apiError is the controller's error answer.
func apiError(what string, status int, body []byte) error {
	var e controllerapi.Error
	if json.Unmarshal(body, &e) == nil && e.Code != "" {
		return fmt.Errorf("%s: the controller answered %d %s: %s", what, status, e.Code, e.Message)
	}
	return fmt.Errorf("%s: the controller answered %d", what, status)
}

// Register registers the host and its GPUs.
func (a *Agent) Register(ctx context.Context) error {
	req := controllerapi.RegisterHostRequest{Address: a.cfg.Address, Gpus: a.cfg.GPUs}
	if req.Gpus == nil {
		req.Gpus = []controllerapi.GPUReport{}
	}
	if a.cfg.Version != "" {
		v := a.cfg.Version
		req.Version = &v
	}
	res, err := a.api.RegisterHostWithResponse(ctx, a.cfg.Host, req)
	if err != nil {
		return fmt.Errorf("registering host %s: %w", a.cfg.Host, err)
	}
	if res.StatusCode() != http.StatusOK {
		return apiError("registering host "+a.cfg.Host, res.StatusCode(), res.Body)
	}
	return nil
}

// Sync heartbeats, pushes usage and applies the desired VMs; the steps
// that fail are reported together, the others done.
func (a *Agent) Sync(ctx context.Context) error {
	res, err := a.api.HeartbeatWithResponse(ctx, a.cfg.Host)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if res.StatusCode() == http.StatusNotFound { // the controller forgot us: register again
		if err := a.Register(ctx); err != nil {
			return err
		}
		if res, err = a.api.HeartbeatWithResponse(ctx, a.cfg.Host); err != nil {
			return fmt.Errorf("heartbeat: %w", err)
		}
	}
	if res.StatusCode() != http.StatusOK || res.JSON200 == nil {
		return apiError("heartbeat", res.StatusCode(), res.Body)
	}
	desired := res.JSON200.Vms
	// Usage first, so that a VM about to be deleted has its last reading
	// taken; the endpoints last, of the VMs as applied.
	return errors.Join(a.pushUsage(ctx), a.apply(ctx, desired), a.reportEndpoints(ctx))
}

// apply makes the host's VMs what the controller wants.
func (a *Agent) apply(ctx context.Context, desired []controllerapi.VM) error {
	local, err := a.local.ListVMs(ctx)
	if err != nil {
		return fmt.Errorf("listing the host's VMs: %w", err)
	}
	have := map[string]hostapi.VM{}
	for _, v := range local {
		have[v.Name] = v
	}
	want := map[string]bool{}
	var errs []error
	for _, d := range desired {
		want[d.Name] = true
		mem := uint64(max(d.MemoryBytes, 0))
		weight := uint32(min(max(d.Weight, hostapi.MinWeight), hostapi.MaxWeight))
		cur, ok := have[d.Name]
		switch {
		case !ok:
			if _, err := a.local.CreateVM(ctx, hostapi.CreateVMRequest{Name: d.Name, Weight: weight, Cap: d.Cap, Memory: mem}); err != nil {
				errs = append(errs, fmt.Errorf("creating vm %q: %w", d.Name, err))
				continue
			}
			a.cfg.Log.Info("created vm for the controller", "vm", d.Name, "tenant", d.Tenant, "generation", d.Generation)
			a.baseline(ctx, d.Name)
		case cur.Weight != weight || cur.Cap != d.Cap || cur.Memory != mem:
			req := hostapi.UpdateVMRequest{Weight: &weight, Cap: &d.Cap, Memory: &mem}
			if _, err := a.local.UpdateVM(ctx, d.Name, req); err != nil {
				errs = append(errs, fmt.Errorf("changing vm %q: %w", d.Name, err))
				continue
			}
			a.cfg.Log.Info("changed vm for the controller", "vm", d.Name, "generation", d.Generation)
		}
		a.st.Managed[d.Name] = true
		a.st.Applied[d.Name] = d.Generation
	}
	var names []string
	for n := range a.st.Managed {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if want[n] {
			continue
		}
		if _, ok := have[n]; ok {
			if err := a.local.DeleteVM(ctx, n); err != nil && !errors.Is(err, hostapi.ErrNotFound) {
				errs = append(errs, fmt.Errorf("deleting vm %q: %w", n, err))
				continue
			}
			a.cfg.Log.Info("deleted vm for the controller", "vm", n)
		}
		delete(a.st.Managed, n)
		delete(a.st.Applied, n)
	}
	if err := a.save(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// baseline takes a new VM's first usage reading, from which its intervals
// count; a name seen before keeps its readings.
func (a *Agent) baseline(ctx context.Context, name string) {
	if _, seen := a.st.VMs[name]; seen {
		return
	}
	u, err := a.local.CommittedUsage(ctx, name)
	if err != nil {
		return // the next push takes it
	}
	a.st.VMs[name] = reading{GPUNs: u.GPUNs, Kernels: u.Kernels, At: a.cfg.Clock().UTC()}
}

// pushUsage reads every managed VM's usage, turns what grew into numbered
// intervals, saves them as pending and sends everything pending.
func (a *Agent) pushUsage(ctx context.Context) error {
	now := a.cfg.Clock().UTC()
	var names []string
	for n := range a.st.Managed {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		u, err := a.local.CommittedUsage(ctx, n)
		if errors.Is(err, hostapi.ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading the usage of vm %q: %w", n, err))
			continue
		}
		last, seen := a.st.VMs[n]
		switch {
		case !seen || u.GPUNs < last.GPUNs || u.Kernels < last.Kernels:
			if seen {
				a.cfg.Log.Warn("usage counter went backwards; taking it as the new baseline", "vm", n,
					"gpu_ns", u.GPUNs, "was", last.GPUNs)
			}
			a.st.VMs[n] = reading{Seq: last.Seq, GPUNs: u.GPUNs, Kernels: u.Kernels, At: now}
		case u.GPUNs > last.GPUNs || u.Kernels > last.Kernels:
			k := int64(u.Kernels - last.Kernels)
			a.st.Pending = append(a.st.Pending, controllerapi.UsageInterval{Vm: n, Seq: last.Seq + 1, Start: last.At, End: now,
				GpuNs: int64(u.GPUNs - last.GPUNs), Kernels: &k})
			a.st.VMs[n] = reading{Seq: last.Seq + 1, GPUNs: u.GPUNs, Kernels: u.Kernels, At: now}
		}
	}
	// Pending intervals are on disk before they leave.
	if err := a.save(); err != nil {
		return errors.Join(append(errs, err)...)
	}
	if len(a.st.Pending) == 0 {
		return errors.Join(errs...)
	}
	res, err := a.api.IngestUsageWithResponse(ctx, controllerapi.IngestUsageRequest{Host: a.cfg.Host, Intervals: a.st.Pending})
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("pushing %d usage intervals: %w", len(a.st.Pending), err))
	case res.StatusCode() != http.StatusOK:
		errs = append(errs, apiError(fmt.Sprintf("pushing %d usage intervals", len(a.st.Pending)), res.StatusCode(), res.Body))
	default:
		a.cfg.Log.Debug("pushed usage", "accepted", res.JSON200.Accepted, "duplicates", res.JSON200.Duplicates)
		a.st.Pending = nil
		if err := a.save(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Run registers (retrying) and syncs every interval until ctx ends.
func (a *Agent) Run(ctx context.Context) {
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	registered := false
	for {
		if !registered {
			if err := a.Register(ctx); err != nil {
				a.cfg.Log.Warn("controller", "err", err)
			} else {
				registered = true
				a.cfg.Log.Info("registered with the controller", "controller", a.cfg.Controller, "host", a.cfg.Host, "gpus", len(a.cfg.GPUs))
			}
		}
		if registered {
			if err := a.Sync(ctx); err != nil {
				a.cfg.Log.Warn("controller sync", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
