package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/api/controllerapi"
)

// hookFleetVM makes vm create/list/get/set/delete talk to sluice-controller
// when one is configured (--controller, SLUICE_CONTROLLER or the config
// file), and adds vm move and vm xml, which only the controller does.
func hookFleetVM(a *app, vm *cobra.Command) {
	for _, name := range []string{"create", "list", "get", "set", "delete"} {
		c, _, err := vm.Find([]string{name}) // Find keeps the order that suggestions follow; Commands sorts it
		if err != nil || c == vm {
			panic("sluicectl: no vm " + name + " command to hook")
		}
		switch name {
		case "create":
			hookVMCreate(a, c)
		case "list":
			var tenant string
			c.Flags().StringVar(&tenant, "tenant", "", "with --controller: only this tenant's VMs")
			fleetOr(a, c, func(cmd *cobra.Command, _ []string) error { return fleetVMList(a, cmd, tenant) }, []string{"tenant"}, nil)
		case "get":
			fleetOr(a, c, func(cmd *cobra.Command, args []string) error { return fleetVMGet(a, cmd, args[0]) }, nil, nil)
		case "set":
			hookVMSet(a, c)
		case "delete":
			fleetOr(a, c, func(cmd *cobra.Command, args []string) error { return fleetVMDelete(a, cmd, args[0]) }, nil, nil)
		}
	}
	vm.AddCommand(newVMMoveCommand(a), newVMXMLCommand(a))
}

// fleetOr runs fleet instead of c's own action when a controller is
// configured. Flags in fleetOnly need a controller; those in localOnly are
// sluiced's and are refused with one.
func fleetOr(a *app, c *cobra.Command, fleet func(*cobra.Command, []string) error, fleetOnly, localOnly []string) {
	local := c.RunE
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if a.fleetMode() {
			for _, n := range localOnly {
				if cmd.Flags().Changed(n) {
					return usageErrorf("--%s is sluiced's, not the controller's: leave out --controller (and %s) to use it", n, ControllerEnv)
				}
			}
			return fleet(cmd, args)
		}
		for _, n := range fleetOnly {
			if cmd.Flags().Changed(n) {
				return usageErrorf("--%s needs a controller: give --controller URL", n)
			}
		}
		return local(cmd, args)
	}
}

func hookVMCreate(a *app, c *cobra.Command) {
	raw := recordRaw(c, "cap", "memory")
	var tenant, place, host string
	f := c.Flags()
	f.StringVar(&tenant, "tenant", "", "with --controller: the VM's tenant (required there)")
	f.StringVar(&place, "placement", "", "with --controller: spread (the GPU with the fewest VMs) or pack (the fullest with room); default the controller's")
	f.StringVar(&host, "host", "", "with --controller: place it on this host (operator)")
	c.Example += `
  sluicectl --controller http://ctl:7070 --token "$T" vm create web --tenant acme --weight 2 --memory 8GiB --placement pack`
	fleetOr(a, c, func(cmd *cobra.Command, args []string) error {
		req := controllerapi.CreateVMRequest{Name: args[0], Tenant: tenant}
		if tenant == "" {
			return usageErrorf("--tenant is required with --controller")
		}
		if cmd.Flags().Changed("weight") {
			w, _ := cmd.Flags().GetUint32("weight")
			if w == 0 {
				return usageErrorf("--weight must be at least 1")
			}
			w64 := int64(w)
			req.Weight = &w64
		}
		if r := raw["cap"]; cmd.Flags().Changed("cap") {
			s, err := ParseShare(r.raw)
			if err != nil {
				return usageErrorf("--cap: %v", err)
			}
			req.Cap = &s
		}
		if r := raw["memory"]; cmd.Flags().Changed("memory") {
			n, err := ParseSize(r.raw)
			if err != nil {
				return usageErrorf("--memory: %v", err)
			}
			m := int64(n)
			req.MemoryBytes = &m
		}
		if place != "" {
			p := controllerapi.Placement(place)
			req.Placement = &p
		}
		if host != "" {
			req.Host = &host
		}
		cl, err := a.fleetClient()
		if err != nil {
			return err
		}
		res, err := cl.CreateVMWithResponse(cmd.Context(), req)
		vm, err := answer(res, res.JSON201, err)
		if err != nil {
			return vmError(args[0], err)
		}
		asJSON, _ := cmd.Flags().GetBool("json")
		return printOr(cmd, asJSON, vm, func() string { return RenderFleetVM(vm) })
	}, []string{"tenant", "placement", "host"}, []string{"channels", "ring-entries", "region-size", "volume", "netns", "cgroup", "max-command"})
}

func hookVMSet(a *app, c *cobra.Command) {
	raw := recordRaw(c, "cap", "memory")
	fleetOr(a, c, func(cmd *cobra.Command, args []string) error {
		var req controllerapi.UpdateVMRequest
		f := cmd.Flags()
		if !f.Changed("weight") && !f.Changed("cap") && !f.Changed("memory") {
			return usageErrorf("nothing to change: give --weight, --cap or --memory")
		}
		if f.Changed("weight") {
			w, _ := f.GetUint32("weight")
			if w == 0 {
				return usageErrorf("--weight must be at least 1")
			}
			w64 := int64(w)
			req.Weight = &w64
		}
		if f.Changed("cap") {
			s, err := ParseShare(raw["cap"].raw)
			if err != nil {
				return usageErrorf("--cap: %v", err)
			}
			req.Cap = &s
		}
		if f.Changed("memory") {
			var m int64
			if s := raw["memory"].raw; !strings.EqualFold(strings.TrimSpace(s), "none") {
				n, err := ParseSize(s)
				if err != nil {
					return usageErrorf("--memory: %v", err)
				}
				m = int64(n)
			}
			req.MemoryBytes = &m
		}
		cl, err := a.fleetClient()
		if err != nil {
			return err
		}
		res, err := cl.UpdateVMWithResponse(cmd.Context(), args[0], req)
		vm, err := answer(res, res.GetJSON200(), err)
		if err != nil {
			return vmError(args[0], err)
		}
		asJSON, _ := f.GetBool("json")
		return printOr(cmd, asJSON, vm, func() string { return RenderFleetVM(vm) })
	}, nil, []string{"syscall-window", "syscall-batch", "max-command"})
}

func fleetVMList(a *app, cmd *cobra.Command, tenant string) error {
	cl, err := a.fleetClient()
	if err != nil {
		return err
	}
	p := &controllerapi.ListVMsParams{}
	if tenant != "" {
		p.Tenant = &tenant
	}
	res, err := cl.ListVMsWithResponse(cmd.Context(), p)
	vms, err := answer(res, res.GetJSON200(), err)
	if err != nil {
		return fmt.Errorf("listing vms: %w", err)
	}
	asJSON, _ := cmd.Flags().GetBool("json")
	return printOr(cmd, asJSON, vms, func() string { return RenderFleetVMTable(vms) })
}

func fleetVMGet(a *app, cmd *cobra.Command, name string) error {
	cl, err := a.fleetClient()
	if err != nil {
		return err
	}
	res, err := cl.GetVMWithResponse(cmd.Context(), name)
	vm, err := answer(res, res.GetJSON200(), err)
	if err != nil {
		return vmError(name, err)
	}
	asJSON, _ := cmd.Flags().GetBool("json")
	return printOr(cmd, asJSON, vm, func() string { return RenderFleetVM(vm) })
}

func fleetVMDelete(a *app, cmd *cobra.Command, name string) error {
	cl, err := a.fleetClient()
	if err != nil {
		return err
	}
	res, err := cl.DeleteVMWithResponse(cmd.Context(), name)
	if _, err := answer[struct{}](res, nil, err); err != nil {
		return vmError(name, err)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "vm %q deleted\n", clean(name))
	return err
}

func newVMMoveCommand(a *app) *cobra.Command {
	var host, place string
	var gpu int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "move NAME [--host H [--gpu N]] [--placement spread|pack]",
		Short: "Move a VM to another GPU (controller, operator)",
		Long: `Ask sluice-controller to move VM NAME to another GPU with room: on --host
(its --gpu, or the one placement picks there), or anywhere else. The VM keeps
its settings; its generation grows, and the hosts apply the move.`,
		Example: `  sluicectl vm move web
  sluicectl vm move web --host gpu-host-2 --gpu 1`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req controllerapi.MoveVMRequest
			if host != "" {
				req.Host = &host
			}
			if cmd.Flags().Changed("gpu") {
				req.Gpu = &gpu
			}
			if place != "" {
				p := controllerapi.Placement(place)
				req.Placement = &p
			}
			cl, err := a.fleetClient()
			if err != nil {
				return err
			}
			res, err := cl.MoveVMWithResponse(cmd.Context(), args[0], req)
			vm, err := answer(res, res.GetJSON200(), err)
			if err != nil {
				return vmError(args[0], err)
			}
			return printOr(cmd, asJSON, vm, func() string { return RenderFleetVM(vm) })
		},
	}
	cmd.Flags().StringVar(&host, "host", "", "the target host")
	cmd.Flags().IntVar(&gpu, "gpu", 0, "the target GPU's index on --host")
	cmd.Flags().StringVar(&place, "placement", "", "spread or pack (default the controller's)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the moved VM as JSON")
	return cmd
}
