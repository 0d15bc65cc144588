package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
	"github.com/sluice-gpu/sluice/vmm-plugin/libvirt"
)

// Defaults of GET /v1/vms/{name}/domain.xml?whole=true.
const (
	DefaultGuestImage = "/var/lib/sluice/guest" // holds vmlinux and initramfs.gz (make guest-image)
	serialLogDir      = "/var/log/libvirt/qemu"
)

// ReportEndpoints replaces what a host reported of its VMs' endpoints.
func (s *Server) ReportEndpoints(w http.ResponseWriter, r *http.Request, name string) {
	err := func() error {
		ctx := r.Context()
		p := principal(ctx)
		if err := requireRole(p, fleet.RoleOperator, fleet.RoleHost); err != nil {
			return err
		}
		if !p.ActsForHost(name) {
			return forbidden("name", "this token acts for host %q, not %q", p.Host, name)
		}
		var req controllerapi.EndpointReport
		if err := decodeBody(w, r, &req); err != nil {
			return err
		}
		if req.Vms == nil {
			return invalid("vms", "field vms is required")
		}
		byVM := make(map[string]controllerapi.VMEndpoint, len(req.Vms))
		for i, ep := range req.Vms {
			f := func(field string) string { return fmt.Sprintf("vms[%d].%s", i, field) }
			if err := checkName(f("vm"), ep.Vm); err != nil {
				return err
			}
			if !filepath.IsAbs(ep.Endpoint) {
				return invalid(f("endpoint"), "field %s %q: want an absolute path", f("endpoint"), ep.Endpoint)
			}
			if ep.Vectors < 1 {
				return invalid(f("vectors"), "field %s %d: want 1 or more", f("vectors"), ep.Vectors)
			}
			if ep.Volume != nil && !filepath.IsAbs(*ep.Volume) {
				return invalid(f("volume"), "field %s %q: want an absolute path", f("volume"), *ep.Volume)
			}
			byVM[ep.Vm] = ep // a VM reported twice: the last
		}
		eps := make([]fleet.Endpoint, 0, len(byVM))
		for vm, ep := range byVM {
			b, err := json.Marshal(ep)
			if err != nil {
				return fmt.Errorf("encoding the endpoint of vm %q: %w", vm, err)
			}
			eps = append(eps, fleet.Endpoint{Host: name, VM: vm, Report: string(b)})
		}
		return withField(s.cfg.Store.SetEndpoints(ctx, name, eps), "name")
	}()
	s.reply(w, r, http.StatusNoContent, nil, err)
}

// GetVMDomainXML answers a VM's libvirt <shmem> device, or a whole domain,
// built by vmm-plugin/libvirt from the endpoint its host reported.
func (s *Server) GetVMDomainXML(w http.ResponseWriter, r *http.Request, name string, params controllerapi.GetVMDomainXMLParams) {
	out, err := func() ([]byte, error) {
		ctx := r.Context()
		p := principal(ctx)
		if err := requireRole(p, fleet.RoleOperator, fleet.RoleTenant); err != nil {
			return nil, err
		}
		whole := params.Whole != nil && *params.Whole
		if !whole {
			for param, set := range map[string]bool{"image": params.Image != nil, "memory_mib": params.MemoryMib != nil,
				"accel": params.Accel != nil, "type": params.Type != nil} {
				if set {
					return nil, invalid(param, "parameter %s needs whole=true", param)
				}
			}
		}
		vm, err := s.visibleVM(ctx, p, name)
		if err != nil {
			return nil, err
		}
		stored, err := s.cfg.Store.Endpoint(ctx, vm.Host, vm.Name)
		if errors.Is(err, fleet.ErrNotFound) {
			return nil, &apiError{status: http.StatusConflict, code: controllerapi.Conflict, field: "name",
				msg: fmt.Sprintf("vm %q: its host %s has not reported its endpoint yet (sluiced creates the VM at its next sync)", vm.Name, vm.Host)}
		}
		if err != nil {
			return nil, fmt.Errorf("reading the endpoint of vm %q: %w", vm.Name, err)
		}
		var ep controllerapi.VMEndpoint
		if err := json.Unmarshal([]byte(stored.Report), &ep); err != nil {
			return nil, fmt.Errorf("decoding the stored endpoint of vm %q: %w", vm.Name, err)
		}
		info := vmInfo(ep)
		if !whole {
			return libvirt.MarshalShmem(libvirt.ShmemFor(info))
		}
		opts, err := domainOptions(vm.Name, info, params)
		if err != nil {
			return nil, err
		}
		return libvirt.Marshal(libvirt.ExampleDomain(opts))
	}()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// vmInfo is what vmm-plugin/libvirt needs of a reported endpoint.
func vmInfo(ep controllerapi.VMEndpoint) libvirt.VMInfo {
	info := libvirt.VMInfo{Endpoint: ep.Endpoint, Vectors: uint(max(ep.Vectors, 0))}
	if ep.Volume != nil {
		info.Volume = *ep.Volume
	}
	if ep.Weight != nil {
		info.Settings.Weight = uint32(min(max(*ep.Weight, 0), 1<<31))
	}
	if ep.Cap != nil {
		info.Settings.Cap = *ep.Cap
	}
	if ep.Channels != nil {
		info.Settings.Channels = *ep.Channels
	}
	if ep.RingEntries != nil {
		info.Settings.RingEntries = *ep.RingEntries
	}
	if ep.RegionSize != nil {
		info.Settings.RegionSize = uint64(max(*ep.RegionSize, 0))
	}
	return info
}

// domainType is the libvirt domain type of accel (kvm, or qemu for tcg),
// or of type, its old name; kvm by default.
func domainType(params controllerapi.GetVMDomainXMLParams) (string, error) {
	switch {
	case params.Accel != nil && params.Type != nil:
		return "", invalid("accel", "parameters accel and type (its old name) exclude each other")
	case params.Accel != nil:
		switch *params.Accel {
		case controllerapi.GetVMDomainXMLParamsAccelKvm:
			return libvirt.DomainTypeKVM, nil
		case controllerapi.GetVMDomainXMLParamsAccelTcg:
			return libvirt.DomainTypeQEMU, nil
		}
		return "", invalid("accel", "parameter accel %q: want kvm or tcg", *params.Accel)
	case params.Type != nil:
		if !params.Type.Valid() {
			return "", invalid("type", "parameter type %q: want kvm or qemu", *params.Type)
		}
		return string(*params.Type), nil
	}
	return libvirt.DomainTypeKVM, nil
}

// domainOptions are the whole domain's options: the guest image on the
// host booted directly, its serial console in libvirt's log directory, no
// firmware ROM (the controller cannot see whether the host has qboot).
func domainOptions(name string, info libvirt.VMInfo, params controllerapi.GetVMDomainXMLParams) (libvirt.DomainOptions, error) {
	image := DefaultGuestImage
	if params.Image != nil {
		image = *params.Image
	}
	if !filepath.IsAbs(image) {
		return libvirt.DomainOptions{}, invalid("image", "parameter image %q: want an absolute directory on the host", image)
	}
	typ, err := domainType(params)
	if err != nil {
		return libvirt.DomainOptions{}, err
	}
	var mem uint64
	if params.MemoryMib != nil {
		if *params.MemoryMib < 1 {
			return libvirt.DomainOptions{}, invalid("memory_mib", "parameter memory_mib %d: want 1 or more", *params.MemoryMib)
		}
		mem = uint64(*params.MemoryMib)
	}
	opts := libvirt.DomainOptions{
		Name: name, Type: typ, MemoryMiB: mem,
		Kernel: filepath.Join(image, "vmlinux"), Initrd: filepath.Join(image, "initramfs.gz"),
		Cmdline: libvirt.DefaultCmdline, SerialLog: filepath.Join(serialLogDir, name+"-serial.log"), VM: info,
	}
	if err := opts.Validate(); err != nil {
		return libvirt.DomainOptions{}, invalid("", "vm %q: %v", name, err)
	}
	return opts, nil
}
