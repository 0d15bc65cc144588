package fleetagent

import (
	"context"
	"fmt"
	"net/http"
	"sort"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/api/hostapi"
)

// reportEndpoints tells the controller the endpoints of the managed VMs the
// host runs, for their libvirt XML (GET /v1/vms/{name}/domain.xml). It is
// sent every sync, and replaces what the controller stored of the last.
func (a *Agent) reportEndpoints(ctx context.Context) error {
	local, err := a.local.ListVMs(ctx)
	if err != nil {
		return fmt.Errorf("listing the host's VMs: %w", err)
	}
	rep := controllerapi.EndpointReport{Vms: []controllerapi.VMEndpoint{}}
	for _, v := range local {
		if a.st.Managed[v.Name] && v.Endpoint != "" && v.Vectors > 0 {
			rep.Vms = append(rep.Vms, endpointOf(v))
		}
	}
	sort.Slice(rep.Vms, func(i, j int) bool { return rep.Vms[i].Vm < rep.Vms[j].Vm })
	res, err := a.api.ReportEndpointsWithResponse(ctx, a.cfg.Host, rep)
	if err != nil {
		return fmt.Errorf("reporting endpoints: %w", err)
	}
	if res.StatusCode() != http.StatusNoContent {
		return apiError("reporting endpoints", res.StatusCode(), res.Body)
	}
	return nil
}

// endpointOf is what a libvirt domain needs of v.
func endpointOf(v hostapi.VM) controllerapi.VMEndpoint {
	weight, capShare, channels, ring := int64(v.Weight), v.Cap, v.Channels, v.RingEntries
	region := int64(min(v.RegionSize, 1<<62))
	ep := controllerapi.VMEndpoint{Vm: v.Name, Endpoint: v.Endpoint, Vectors: v.Vectors,
		Weight: &weight, Cap: &capShare, Channels: &channels, RingEntries: &ring, RegionSize: &region}
	if v.Volume != "" {
		vol := v.Volume
		ep.Volume = &vol
	}
	return ep
}
