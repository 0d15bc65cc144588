// Package server is sluice-controller's HTTP API: it implements the server
// interface generated in api/controllerapi over a Store, authenticates every
// request by its bearer token, authorises it by the token's role and
// tenant, places VMs (controller/internal/placement), marks hosts that miss
// their heartbeats down, and records every change in the audit log.
//
// Authorisation: an unknown or revoked token is 401 on every route; a role
// that may not use a route is 403; a tenant naming another tenant's VM gets
// 404, as if it did not exist (VM names do not leak across tenants), and a
// tenant asking to list or create for another tenant gets 403 naming the
// field.
//
// Mutations that depend on capacity (create, move, a memory change, a
// registration) run one at a time: under a mutex in the process and, when
// the store is shared by several controllers (CapacityLocker: PostgreSQL),
// under its database-wide lock as well.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
	"github.com/sluice-gpu/sluice/controller/internal/placement"
	"github.com/sluice-gpu/sluice/internal/ctlmetrics"
)

// Store is what the server needs of its persistence
// (controller/internal/store/sqlite implements it). Every mutation records
// its audit event in the same transaction.
type Store interface {
	CreateToken(ctx context.Context, t fleet.Token, ev fleet.Event) error
	TokenByHash(ctx context.Context, hash []byte) (fleet.Token, error)
	ListTokens(ctx context.Context) ([]fleet.Token, error)
	RevokeToken(ctx context.Context, id string, at time.Time, ev fleet.Event) error

	RegisterHost(ctx context.Context, h fleet.Host, ev fleet.Event) error
	Heartbeat(ctx context.Context, name string, at time.Time, upEvent fleet.Event) (wasDown bool, err error)
	MarkDown(ctx context.Context, name string, staleBefore time.Time, ev fleet.Event) (changed bool, err error)
	Host(ctx context.Context, name string) (fleet.Host, error)
	ListHosts(ctx context.Context) ([]fleet.Host, error)
	SetDraining(ctx context.Context, name string, draining bool, ev fleet.Event) (changed bool, err error)
	DeleteHost(ctx context.Context, name string, ev fleet.Event) error
	SetEndpoints(ctx context.Context, host string, eps []fleet.Endpoint) error
	Endpoint(ctx context.Context, host, vm string) (fleet.Endpoint, error)

	CreateVM(ctx context.Context, vm fleet.VM, ev fleet.Event) error
	VM(ctx context.Context, name string) (fleet.VM, error)
	ListVMs(ctx context.Context, tenant string) ([]fleet.VM, error)
	UpdateVM(ctx context.Context, vm fleet.VM, ev fleet.Event) error
	DeleteVM(ctx context.Context, name string, ev fleet.Event) error

	IngestUsage(ctx context.Context, intervals []fleet.UsageInterval) (accepted, duplicates int, err error)
	QueryUsage(ctx context.Context, q fleet.UsageQuery) ([]fleet.UsageInterval, error)

	AddEvent(ctx context.Context, ev fleet.Event) error
	ListEvents(ctx context.Context, since time.Time, limit int) ([]fleet.Event, error)
}

// Config configures a Server. Zero fields take the defaults.
type Config struct {
	Store            Store
	Clock            func() time.Time // default time.Now
	HeartbeatTimeout time.Duration    // a host silent this long is down; default 30s
	MaxVMsPerGPU     int              // default 16
	Placement        placement.Policy // default spread
	Version          string           // the controller's, for whoami
	Log              *slog.Logger     // default slog.Default()
}

// Defaults.
const (
	DefaultHeartbeatTimeout = 30 * time.Second
	DefaultMaxVMsPerGPU     = 16
)

// Server serves the controller API.
type Server struct {
	cfg     Config
	mu      sync.Mutex // serialises capacity-dependent mutations
	metrics *ctlmetrics.Metrics
}

var _ controllerapi.ServerInterface = (*Server)(nil)

// New returns a server over cfg.Store.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("server: no store")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.MaxVMsPerGPU <= 0 {
		cfg.MaxVMsPerGPU = DefaultMaxVMsPerGPU
	}
	if cfg.Placement == "" {
		cfg.Placement = placement.Spread
	}
	if _, err := placement.Parse(string(cfg.Placement)); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Server{cfg: cfg}
	s.metrics = ctlmetrics.New(s.fleetMetrics)
	return s, nil
}

func (s *Server) now() time.Time { return s.cfg.Clock().UTC() }

// Handler returns the HTTP handler: authentication around the generated
// router, JSON errors for bad parameters and unknown routes, every request
// counted and timed by route and code (Metrics).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	controllerapi.HandlerWithOptions(s, controllerapi.StdHTTPServerOptions{
		BaseRouter:       mux,
		ErrorHandlerFunc: s.paramError,
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: controllerapi.NotFound,
			msg: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
	route := func(r *http.Request) string { _, pattern := mux.Handler(r); return pattern }
	return s.metrics.Instrument(route, s.authenticate(mux))
}

// Run marks silent hosts down every third of the heartbeat timeout until
// ctx ends.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.HeartbeatTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Sweep(ctx); err != nil {
				s.cfg.Log.Error("marking silent hosts down", "err", err)
			}
		}
	}
}

// Sweep marks down every host that has not heartbeated within the timeout
// and records a host.down event for each, naming the VMs now flagged. Run
// calls it periodically, and every read of hosts or VMs first, so that no
// reader sees a host down that the audit log does not.
func (s *Server) Sweep(ctx context.Context) error {
	hosts, err := s.cfg.Store.ListHosts(ctx)
	if err != nil {
		return fmt.Errorf("listing hosts: %w", err)
	}
	now := s.now()
	stale := now.Add(-s.cfg.HeartbeatTimeout)
	for _, h := range hosts {
		if h.Down || !h.LastHeartbeat.Before(stale) {
			continue
		}
		vms, err := s.vmsOn(ctx, h.Name)
		if err != nil {
			return err
		}
		ev := fleet.Event{Time: now, Actor: "controller", Action: "host.down", Target: h.Name,
			Detail: fmt.Sprintf("no heartbeat since %s; %d VMs flagged", h.LastHeartbeat.Format(time.RFC3339), len(vms))}
		changed, err := s.cfg.Store.MarkDown(ctx, h.Name, stale, ev)
		if err != nil {
			return fmt.Errorf("marking host %q down: %w", h.Name, err)
		}
		if changed {
			s.cfg.Log.Warn("host down", "host", h.Name, "last_heartbeat", h.LastHeartbeat, "vms", len(vms))
		}
	}
	return nil
}

// hostDown reports whether h counts as down now: marked so, or silent past
// the timeout (a reader sweeps first, so this is the same but for a race).
func (s *Server) hostDown(h fleet.Host) bool {
	return h.Down || s.now().Sub(h.LastHeartbeat) > s.cfg.HeartbeatTimeout
}

func (s *Server) vmsOn(ctx context.Context, host string) ([]fleet.VM, error) {
	all, err := s.cfg.Store.ListVMs(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("listing vms: %w", err)
	}
	var out []fleet.VM
	for _, v := range all {
		if v.Host == host {
			out = append(out, v)
		}
	}
	return out, nil
}
