package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/controller/internal/auth"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
	"github.com/sluice-gpu/sluice/controller/internal/placement"
)

const maxWeight = 1_000_000

// visibleVM returns VM name if p may see it; another tenant's VM is
// not found, as if it did not exist.
func (s *Server) visibleVM(ctx context.Context, p auth.Principal, name string) (fleet.VM, error) {
	vm, err := s.cfg.Store.VM(ctx, name)
	if err == nil && !p.SeesTenant(vm.Tenant) {
		err = fmt.Errorf("vm %q: %w", name, fleet.ErrNotFound)
	}
	return vm, withField(err, "name")
}

func (s *Server) hostIsDown(ctx context.Context, host string) bool {
	if err := s.Sweep(ctx); err != nil {
		s.cfg.Log.Error("marking silent hosts down", "err", err)
	}
	h, err := s.cfg.Store.Host(ctx, host)
	return err != nil || s.hostDown(h)
}

// ListVMs lists the VMs the caller may see, of one tenant if asked.
func (s *Server) ListVMs(w http.ResponseWriter, r *http.Request, params controllerapi.ListVMsParams) {
	out, err := func() ([]controllerapi.VM, error) {
		ctx := r.Context()
		p := principal(ctx)
		if err := requireRole(p, fleet.RoleOperator, fleet.RoleTenant); err != nil {
			return nil, err
		}
		tenant := ""
		if params.Tenant != nil {
			tenant = *params.Tenant
		}
		if p.Role == fleet.RoleTenant {
			if tenant != "" && tenant != p.Tenant {
				return nil, forbidden("tenant", "this token is tenant %q's, not %q's", p.Tenant, tenant)
			}
			tenant = p.Tenant
		}
		v, err := s.view(ctx)
		if err != nil {
			return nil, err
		}
		out := []controllerapi.VM{}
		for _, vm := range v.vms {
			if tenant == "" || vm.Tenant == tenant {
				out = append(out, apiVM(vm, v.down[vm.Host]))
			}
		}
		return out, nil
	}()
	s.reply(w, r, http.StatusOK, out, err)
}

// GetVM answers one VM.
func (s *Server) GetVM(w http.ResponseWriter, r *http.Request, name string) {
	out, err := func() (controllerapi.VM, error) {
		ctx := r.Context()
		p := principal(ctx)
		if err := requireRole(p, fleet.RoleOperator, fleet.RoleTenant); err != nil {
			return controllerapi.VM{}, err
		}
		vm, err := s.visibleVM(ctx, p, name)
		if err != nil {
			return controllerapi.VM{}, err
		}
		return apiVM(vm, s.hostIsDown(ctx, vm.Host)), nil
	}()
	s.reply(w, r, http.StatusOK, out, err)
}

// CreateVM creates a VM and places it.
func (s *Server) CreateVM(w http.ResponseWriter, r *http.Request) {
	out, err := func() (controllerapi.VM, error) {
		ctx := r.Context()
		p := principal(ctx)
		if err := requireRole(p, fleet.RoleOperator, fleet.RoleTenant); err != nil {
			return controllerapi.VM{}, err
		}
		var req controllerapi.CreateVMRequest
		if err := decodeBody(w, r, &req); err != nil {
			return controllerapi.VM{}, err
		}
		if err := checkName("name", req.Name); err != nil {
			return controllerapi.VM{}, err
		}
		if err := checkName("tenant", req.Tenant); err != nil {
			return controllerapi.VM{}, err
		}
		if !p.SeesTenant(req.Tenant) {
			return controllerapi.VM{}, forbidden("tenant", "this token is tenant %q's, not %q's", p.Tenant, req.Tenant)
		}
		vm := fleet.VM{Name: req.Name, Tenant: req.Tenant, Weight: 1}
		if err := applySettings(&vm, req.Weight, req.Cap, req.MemoryBytes); err != nil {
			return controllerapi.VM{}, err
		}
		policy, err := s.policy(req.Placement)
		if err != nil {
			return controllerapi.VM{}, err
		}
		host := ""
		if req.Host != nil {
			if !p.IsOperator() {
				return controllerapi.VM{}, forbidden("host", "only an operator chooses the host")
			}
			host = *req.Host
		}
		unlock, err := s.lockCapacity(ctx)
		if err != nil {
			return controllerapi.VM{}, err
		}
		defer unlock()
		if _, err := s.cfg.Store.VM(ctx, vm.Name); err == nil {
			return controllerapi.VM{}, &apiError{status: http.StatusConflict, code: controllerapi.Exists, field: "name",
				msg: fmt.Sprintf("vm %q: already exists", vm.Name)}
		}
		v, err := s.view(ctx)
		if err != nil {
			return controllerapi.VM{}, err
		}
		if err := v.refuseDraining("host", host); err != nil {
			return controllerapi.VM{}, err
		}
		slot, err := placement.Pick(policy, v.candidates(nil, func(sl placement.Slot) bool { return host == "" || sl.Host == host }),
			vm.MemoryBytes, s.cfg.MaxVMsPerGPU)
		if err != nil {
			return controllerapi.VM{}, withField(err, "memory_bytes")
		}
		now := s.now()
		vm.Host, vm.GPU, vm.Created, vm.Updated, vm.Generation = slot.Host, slot.GPU, now, now, 1
		ev := s.event(ctx, "vm.create", vm.Name, fmt.Sprintf("tenant %s, %s, on %s/%d (%s)", vm.Tenant, settings(vm), vm.Host, vm.GPU, policy))
		if err := s.cfg.Store.CreateVM(ctx, vm, ev); err != nil {
			return controllerapi.VM{}, withField(err, "name")
		}
		return apiVM(vm, false), nil
	}()
	s.reply(w, r, http.StatusCreated, out, err)
}

func (s *Server) policy(p *controllerapi.Placement) (placement.Policy, error) {
	if p == nil {
		return s.cfg.Placement, nil
	}
	policy, err := placement.Parse(string(*p))
	if err != nil {
		return "", invalid("placement", "field placement %q: want spread or pack", *p)
	}
	return policy, nil
}

// applySettings checks and applies the settings given.
func applySettings(vm *fleet.VM, weight *int64, cap *float64, mem *int64) error {
	if weight != nil {
		if *weight < 1 || *weight > maxWeight {
			return invalid("weight", "field weight %d: want 1 to %d", *weight, maxWeight)
		}
		vm.Weight = *weight
	}
	if cap != nil {
		if !(*cap >= 0 && *cap <= 1) {
			return invalid("cap", "field cap %v: want 0 (none) to 1", *cap)
		}
		vm.Cap = *cap
	}
	if mem != nil {
		if *mem < 0 {
			return invalid("memory_bytes", "field memory_bytes %d: want 0 (none) or more", *mem)
		}
		vm.MemoryBytes = *mem
	}
	return nil
}

func settings(vm fleet.VM) string {
	return fmt.Sprintf("weight %d, cap %g, memory %d", vm.Weight, vm.Cap, vm.MemoryBytes)
}

// UpdateVM changes a VM's weight, cap or memory quota.
func (s *Server) UpdateVM(w http.ResponseWriter, r *http.Request, name string) {
	out, err := func() (controllerapi.VM, error) {
		ctx := r.Context()
		p := principal(ctx)
		if err := requireRole(p, fleet.RoleOperator, fleet.RoleTenant); err != nil {
			return controllerapi.VM{}, err
		}
		var req controllerapi.UpdateVMRequest
		if err := decodeBody(w, r, &req); err != nil {
			return controllerapi.VM{}, err
		}
		if req.Weight == nil && req.Cap == nil && req.MemoryBytes == nil {
			return controllerapi.VM{}, invalid("", "nothing to change: give weight, cap or memory_bytes")
		}
		unlock, err := s.lockCapacity(ctx)
		if err != nil {
			return controllerapi.VM{}, err
		}
		defer unlock()
		old, err := s.visibleVM(ctx, p, name)
		if err != nil {
			return controllerapi.VM{}, err
		}
		vm := old
		if err := applySettings(&vm, req.Weight, req.Cap, req.MemoryBytes); err != nil {
			return controllerapi.VM{}, err
		}
		if vm.MemoryBytes > old.MemoryBytes {
			v, err := s.view(ctx)
			if err != nil {
				return controllerapi.VM{}, err
			}
			sl := *v.slots[[2]any{vm.Host, vm.GPU}]
			if vm.MemoryBytes-old.MemoryBytes > sl.Free() {
				return controllerapi.VM{}, &apiError{status: http.StatusConflict, code: controllerapi.NoCapacity, field: "memory_bytes",
					msg: fmt.Sprintf("GPU %s/%d has %d bytes free, the quota grows by %d", vm.Host, vm.GPU, sl.Free(), vm.MemoryBytes-old.MemoryBytes)}
			}
		}
		vm.Updated, vm.Generation = s.now(), old.Generation+1
		ev := s.event(ctx, "vm.update", name, fmt.Sprintf("%s (was %s)", settings(vm), settings(old)))
		if err := s.cfg.Store.UpdateVM(ctx, vm, ev); err != nil {
			return controllerapi.VM{}, withField(err, "name")
		}
		return apiVM(vm, s.hostIsDown(ctx, vm.Host)), nil
	}()
	s.reply(w, r, http.StatusOK, out, err)
}

// DeleteVM deletes a VM; its usage stays.
func (s *Server) DeleteVM(w http.ResponseWriter, r *http.Request, name string) {
	err := func() error {
		ctx := r.Context()
		p := principal(ctx)
		if err := requireRole(p, fleet.RoleOperator, fleet.RoleTenant); err != nil {
			return err
		}
		unlock, err := s.lockCapacity(ctx)
		if err != nil {
			return err
		}
		defer unlock()
		vm, err := s.visibleVM(ctx, p, name)
		if err != nil {
			return err
		}
		ev := s.event(ctx, "vm.delete", name, fmt.Sprintf("tenant %s, was on %s/%d", vm.Tenant, vm.Host, vm.GPU))
		return withField(s.cfg.Store.DeleteVM(ctx, name, ev), "name")
	}()
	s.reply(w, r, http.StatusNoContent, nil, err)
}

// MoveVM moves a VM to another GPU (operator).
func (s *Server) MoveVM(w http.ResponseWriter, r *http.Request, name string) {
	out, err := func() (controllerapi.VM, error) {
		ctx := r.Context()
		if err := requireOperator(principal(ctx)); err != nil {
			return controllerapi.VM{}, err
		}
		var req controllerapi.MoveVMRequest
		if err := decodeBody(w, r, &req); err != nil {
			return controllerapi.VM{}, err
		}
		if req.Gpu != nil && req.Host == nil {
			return controllerapi.VM{}, invalid("gpu", "field gpu needs field host")
		}
		policy, err := s.policy(req.Placement)
		if err != nil {
			return controllerapi.VM{}, err
		}
		unlock, err := s.lockCapacity(ctx)
		if err != nil {
			return controllerapi.VM{}, err
		}
		defer unlock()
		old, err := s.cfg.Store.VM(ctx, name)
		if err != nil {
			return controllerapi.VM{}, withField(err, "name")
		}
		v, err := s.view(ctx)
		if err != nil {
			return controllerapi.VM{}, err
		}
		if req.Host != nil {
			if err := v.refuseDraining("host", *req.Host); err != nil {
				return controllerapi.VM{}, err
			}
		}
		keep := func(sl placement.Slot) bool {
			if sl.Host == old.Host && sl.GPU == old.GPU {
				return false // a move goes elsewhere
			}
			return (req.Host == nil || sl.Host == *req.Host) && (req.Gpu == nil || sl.GPU == *req.Gpu)
		}
		slot, err := placement.Pick(policy, v.candidates(&old, keep), old.MemoryBytes, s.cfg.MaxVMsPerGPU)
		if err != nil {
			field := "host"
			if req.Host == nil {
				field = ""
			}
			return controllerapi.VM{}, withField(err, field)
		}
		vm := old
		vm.Host, vm.GPU, vm.Updated, vm.Generation = slot.Host, slot.GPU, s.now(), old.Generation+1
		ev := s.event(ctx, "vm.move", name, fmt.Sprintf("from %s/%d to %s/%d", old.Host, old.GPU, vm.Host, vm.GPU))
		if err := s.cfg.Store.UpdateVM(ctx, vm, ev); err != nil {
			return controllerapi.VM{}, withField(err, "name")
		}
		return apiVM(vm, false), nil
	}()
	s.reply(w, r, http.StatusOK, out, err)
}
