package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
	"github.com/sluice-gpu/sluice/controller/internal/placement"
)

// fleetView is the hosts and VMs at one moment, with what each GPU holds.
type fleetView struct {
	hosts []fleet.Host
	down  map[string]bool
	vms   []fleet.VM
	slots map[[2]any]*placement.Slot // by {host, gpu}
}

func (s *Server) view(ctx context.Context) (*fleetView, error) {
	// A host found silent is marked down now, with its event, so that what
	// a reader sees and the audit log agree even between sweeps.
	if err := s.Sweep(ctx); err != nil {
		return nil, err
	}
	hosts, err := s.cfg.Store.ListHosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing hosts: %w", err)
	}
	vms, err := s.cfg.Store.ListVMs(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("listing vms: %w", err)
	}
	v := &fleetView{hosts: hosts, down: map[string]bool{}, vms: vms, slots: map[[2]any]*placement.Slot{}}
	for _, h := range hosts {
		v.down[h.Name] = s.hostDown(h)
		for _, g := range h.GPUs {
			v.slots[[2]any{h.Name, g.Index}] = &placement.Slot{Host: h.Name, GPU: g.Index, MemoryBytes: g.MemoryBytes}
		}
	}
	for _, vm := range vms {
		if sl := v.slots[[2]any{vm.Host, vm.GPU}]; sl != nil {
			sl.VMs++
			sl.MemoryPlaced += vm.MemoryBytes
		}
	}
	return v, nil
}

// refuseDraining is a conflict naming field when host is draining.
func (v *fleetView) refuseDraining(field, host string) error {
	for _, h := range v.hosts {
		if h.Name == host && h.Draining {
			return &apiError{status: http.StatusConflict, code: controllerapi.Conflict, field: field,
				msg: fmt.Sprintf("host %q is draining: it takes no new VMs", host)}
		}
	}
	return nil
}

// candidates are the slots of up hosts not draining that keep returns true
// for, with the VM named except (if any) taken off its GPU, as if it were
// not placed.
func (v *fleetView) candidates(except *fleet.VM, keep func(placement.Slot) bool) []placement.Slot {
	var out []placement.Slot
	for _, h := range v.hosts {
		if v.down[h.Name] || h.Draining {
			continue
		}
		for _, g := range h.GPUs {
			sl := *v.slots[[2]any{h.Name, g.Index}]
			if except != nil && except.Host == sl.Host && except.GPU == sl.GPU {
				sl.VMs--
				sl.MemoryPlaced -= except.MemoryBytes
			}
			if keep(sl) {
				out = append(out, sl)
			}
		}
	}
	return out
}

func (v *fleetView) apiHost(h fleet.Host) controllerapi.Host {
	out := controllerapi.Host{Name: h.Name, Address: h.Address, Version: ptrIfSet(h.Version), State: controllerapi.Up,
		Draining: h.Draining, Registered: h.Registered, LastHeartbeat: h.LastHeartbeat, Gpus: []controllerapi.GPU{}}
	if v.down[h.Name] {
		out.State = controllerapi.Down
	}
	for _, g := range h.GPUs {
		out.Gpus = append(out.Gpus, v.apiGPU(g))
		out.Vms += v.slots[[2]any{h.Name, g.Index}].VMs
	}
	return out
}

func (v *fleetView) apiGPU(g fleet.GPU) controllerapi.GPU {
	sl := v.slots[[2]any{g.Host, g.Index}]
	out := controllerapi.GPU{Host: g.Host, Index: g.Index, Model: g.Model, MemoryBytes: g.MemoryBytes,
		MemoryPlacedBytes: sl.MemoryPlaced, Vms: sl.VMs, PciAddress: optString(g.PCIAddress), NumaNode: g.NUMANode,
		Driver: optString(g.Driver), IommuGroup: g.IOMMUGroup, SriovTotalvfs: g.SRIOVTotalVFs, SriovNumvfs: g.SRIOVNumVFs}
	if len(g.VFs) > 0 {
		vfs := make([]controllerapi.PCIVF, len(g.VFs))
		for i, vf := range g.VFs {
			vfs[i] = controllerapi.PCIVF{Address: vf.Address, Driver: optString(vf.Driver)}
		}
		out.Vfs = &vfs
	}
	return out
}

// optString is an optional string of the API: absent when empty.
func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// gpuFromReport is a host's GPU report in the fleet's terms, or an error
// naming the offending field (field is "gpus[i]").
func gpuFromReport(host, field string, g controllerapi.GPUReport) (fleet.GPU, error) {
	out := fleet.GPU{Host: host, Index: g.Index, Model: g.Model, MemoryBytes: g.MemoryBytes,
		NUMANode: g.NumaNode, IOMMUGroup: g.IommuGroup, SRIOVTotalVFs: g.SriovTotalvfs, SRIOVNumVFs: g.SriovNumvfs}
	if g.PciAddress != nil {
		out.PCIAddress = *g.PciAddress
	}
	if g.Driver != nil {
		out.Driver = *g.Driver
	}
	for _, f := range []struct {
		name string
		p    *int
	}{{"numa_node", g.NumaNode}, {"iommu_group", g.IommuGroup}, {"sriov_totalvfs", g.SriovTotalvfs}, {"sriov_numvfs", g.SriovNumvfs}} {
		if name, p := f.name, f.p; p != nil && *p < 0 {
			return out, invalid(field+"."+name, "field %s.%s: want at least 0 (absent when unknown)", field, name)
		}
	}
	if g.Vfs != nil {
		for j, vf := range *g.Vfs {
			if vf.Address == "" {
				return out, invalid(fmt.Sprintf("%s.vfs[%d].address", field, j), "field %s.vfs[%d].address is required", field, j)
			}
			v := fleet.VF{Address: vf.Address}
			if vf.Driver != nil {
				v.Driver = *vf.Driver
			}
			out.VFs = append(out.VFs, v)
		}
	}
	return out, nil
}

// ListHosts lists every host (operator).
func (s *Server) ListHosts(w http.ResponseWriter, r *http.Request) {
	out, err := func() ([]controllerapi.Host, error) {
		if err := requireOperator(principal(r.Context())); err != nil {
			return nil, err
		}
		v, err := s.view(r.Context())
		if err != nil {
			return nil, err
		}
		out := make([]controllerapi.Host, 0, len(v.hosts))
		for _, h := range v.hosts {
			out = append(out, v.apiHost(h))
		}
		return out, nil
	}()
	s.reply(w, r, http.StatusOK, out, err)
}

// GetHost answers one host (operator).
func (s *Server) GetHost(w http.ResponseWriter, r *http.Request, name string) {
	out, err := func() (controllerapi.Host, error) {
		if err := requireOperator(principal(r.Context())); err != nil {
			return controllerapi.Host{}, err
		}
		return s.hostNamed(r.Context(), name)
	}()
	s.reply(w, r, http.StatusOK, out, err)
}

func (s *Server) hostNamed(ctx context.Context, name string) (controllerapi.Host, error) {
	v, err := s.view(ctx)
	if err != nil {
		return controllerapi.Host{}, err
	}
	i := slices.IndexFunc(v.hosts, func(h fleet.Host) bool { return h.Name == name })
	if i < 0 {
		return controllerapi.Host{}, &apiError{status: http.StatusNotFound, code: controllerapi.NotFound, field: "name",
			msg: fmt.Sprintf("host %q: not found", name)}
	}
	return v.apiHost(v.hosts[i]), nil
}

// DrainHost makes host name take no new VMs (operator).
func (s *Server) DrainHost(w http.ResponseWriter, r *http.Request, name string) {
	out, err := s.setDraining(r.Context(), name, true)
	s.reply(w, r, http.StatusOK, out, err)
}

// UndrainHost makes host name take new VMs again (operator).
func (s *Server) UndrainHost(w http.ResponseWriter, r *http.Request, name string) {
	out, err := s.setDraining(r.Context(), name, false)
	s.reply(w, r, http.StatusOK, out, err)
}

func (s *Server) setDraining(ctx context.Context, name string, draining bool) (controllerapi.Host, error) {
	if err := requireOperator(principal(ctx)); err != nil {
		return controllerapi.Host{}, err
	}
	// Under the capacity lock, so that a placement that read the host as
	// open commits before the draining does.
	unlock, err := s.lockCapacity(ctx)
	if err != nil {
		return controllerapi.Host{}, err
	}
	defer unlock()
	vms, err := s.vmsOn(ctx, name)
	if err != nil {
		return controllerapi.Host{}, err
	}
	action, detail := "host.undrain", "takes new VMs again"
	if draining {
		action, detail = "host.drain", fmt.Sprintf("takes no new VMs; %d VMs stay until moved", len(vms))
	}
	if _, err := s.cfg.Store.SetDraining(ctx, name, draining, s.event(ctx, action, name, detail)); err != nil {
		return controllerapi.Host{}, withField(err, "name")
	}
	return s.hostNamed(ctx, name)
}

// DeleteHost retires host name and its GPUs (operator); refused while VMs
// are placed on it. Its usage stays.
func (s *Server) DeleteHost(w http.ResponseWriter, r *http.Request, name string) {
	err := func() error {
		ctx := r.Context()
		if err := requireOperator(principal(ctx)); err != nil {
			return err
		}
		unlock, err := s.lockCapacity(ctx)
		if err != nil {
			return err
		}
		defer unlock()
		h, err := s.cfg.Store.Host(ctx, name)
		if err != nil {
			return withField(err, "name")
		}
		ev := s.event(ctx, "host.delete", name, fmt.Sprintf("address %s, %d GPUs", h.Address, len(h.GPUs)))
		if err := s.cfg.Store.DeleteHost(ctx, name, ev); err != nil {
			return withField(err, "name")
		}
		return nil
	}()
	s.reply(w, r, http.StatusNoContent, nil, err)
}

// ListGPUs lists every GPU with what is placed on it (operator).
func (s *Server) ListGPUs(w http.ResponseWriter, r *http.Request) {
	out, err := func() ([]controllerapi.GPU, error) {
		if err := requireOperator(principal(r.Context())); err != nil {
			return nil, err
		}
		v, err := s.view(r.Context())
		if err != nil {
			return nil, err
		}
		out := []controllerapi.GPU{}
		for _, h := range v.hosts {
			for _, g := range h.GPUs {
				out = append(out, v.apiGPU(g))
			}
		}
		return out, nil
	}()
	s.reply(w, r, http.StatusOK, out, err)
}

// RegisterHost registers host name or refreshes it (its host token, or an
// operator).
func (s *Server) RegisterHost(w http.ResponseWriter, r *http.Request, name string) {
	out, err := func() (controllerapi.Host, error) {
		ctx := r.Context()
		p := principal(ctx)
		if err := requireRole(p, fleet.RoleOperator, fleet.RoleHost); err != nil {
			return controllerapi.Host{}, err
		}
		if !p.ActsForHost(name) {
			return controllerapi.Host{}, forbidden("name", "this token acts for host %q, not %q", p.Host, name)
		}
		if err := checkName("name", name); err != nil {
			return controllerapi.Host{}, err
		}
		var req controllerapi.RegisterHostRequest
		if err := decodeBody(w, r, &req); err != nil {
			return controllerapi.Host{}, err
		}
		if req.Address == "" {
			return controllerapi.Host{}, invalid("address", "field address is required")
		}
		if req.Gpus == nil {
			return controllerapi.Host{}, invalid("gpus", "field gpus is required (an empty list for none)")
		}
		now := s.now()
		h := fleet.Host{Name: name, Address: req.Address, Registered: now, LastHeartbeat: now}
		if req.Version != nil {
			h.Version = *req.Version
		}
		seen := map[int]bool{}
		for i, g := range req.Gpus {
			field := fmt.Sprintf("gpus[%d]", i)
			switch {
			case g.Index < 0 || seen[g.Index]:
				return controllerapi.Host{}, invalid(field+".index", "field %s.index %d: want a distinct index >= 0", field, g.Index)
			case g.MemoryBytes < 1:
				return controllerapi.Host{}, invalid(field+".memory_bytes", "field %s.memory_bytes: want at least 1", field)
			case g.Model == "":
				return controllerapi.Host{}, invalid(field+".model", "field %s.model is required", field)
			}
			seen[g.Index] = true
			gpu, err := gpuFromReport(name, field, g)
			if err != nil {
				return controllerapi.Host{}, err
			}
			h.GPUs = append(h.GPUs, gpu)
		}
		unlock, err := s.lockCapacity(ctx)
		if err != nil {
			return controllerapi.Host{}, err
		}
		defer unlock()
		// A quota placed on a GPU that shrank stays: the host reports what
		// it has, and the operator moves VMs off (placement sees no room).
		ev := s.event(ctx, "host.register", name, fmt.Sprintf("address %s, %d GPUs", h.Address, len(h.GPUs)))
		if err := s.cfg.Store.RegisterHost(ctx, h, ev); err != nil {
			return controllerapi.Host{}, withField(err, "gpus")
		}
		return s.hostNamed(ctx, name)
	}()
	s.reply(w, r, http.StatusOK, out, err)
}

// Heartbeat records that host name is alive and answers the VMs it should
// run (its host token, or an operator).
func (s *Server) Heartbeat(w http.ResponseWriter, r *http.Request, name string) {
	out, err := func() (controllerapi.DesiredState, error) {
		ctx := r.Context()
		p := principal(ctx)
		if err := requireRole(p, fleet.RoleOperator, fleet.RoleHost); err != nil {
			return controllerapi.DesiredState{}, err
		}
		if !p.ActsForHost(name) {
			return controllerapi.DesiredState{}, forbidden("name", "this token acts for host %q, not %q", p.Host, name)
		}
		up := s.event(ctx, "host.up", name, "heartbeat after being marked down")
		if _, err := s.cfg.Store.Heartbeat(ctx, name, s.now(), up); err != nil {
			return controllerapi.DesiredState{}, withField(err, "name")
		}
		h, err := s.hostNamed(ctx, name)
		if err != nil {
			return controllerapi.DesiredState{}, err
		}
		vms, err := s.vmsOn(ctx, name)
		if err != nil {
			return controllerapi.DesiredState{}, err
		}
		out := controllerapi.DesiredState{Host: h, Vms: []controllerapi.VM{}}
		for _, vm := range vms {
			out.Vms = append(out.Vms, apiVM(vm, false))
		}
		return out, nil
	}()
	s.reply(w, r, http.StatusOK, out, err)
}
