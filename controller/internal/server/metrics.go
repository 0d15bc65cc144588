package server

import (
	"context"
	"fmt"

	"github.com/sluice-gpu/sluice/internal/ctlmetrics"
)

// Metrics is the controller's Prometheus metrics (internal/ctlmetrics):
// requests by route and code, the fleet, usage ingested. sluice-controller
// serves them on --metrics-listen.
func (s *Server) Metrics() *ctlmetrics.Metrics { return s.metrics }

// fleetMetrics reads the fleet for a scrape: two reads of the store, no
// sweep (a scrape changes nothing), a silent host counted down as a reader
// would see it.
func (s *Server) fleetMetrics(ctx context.Context) (ctlmetrics.Fleet, error) {
	hosts, err := s.cfg.Store.ListHosts(ctx)
	if err != nil {
		return ctlmetrics.Fleet{}, fmt.Errorf("listing hosts: %w", err)
	}
	vms, err := s.cfg.Store.ListVMs(ctx, "")
	if err != nil {
		return ctlmetrics.Fleet{}, fmt.Errorf("listing vms: %w", err)
	}
	var f ctlmetrics.Fleet
	down := map[string]bool{}
	for _, h := range hosts {
		if s.hostDown(h) {
			f.HostsDown++
			down[h.Name] = true
		} else {
			f.HostsUp++
		}
		f.GPUs += len(h.GPUs)
	}
	f.VMs = len(vms)
	for _, v := range vms {
		if down[v.Host] {
			f.VMsOnDownHosts++
		}
	}
	return f, nil
}
