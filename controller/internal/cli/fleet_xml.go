package cli

import (
	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/internal/cmdline"
)

// newVMXMLCommand is "vm xml": a VM's libvirt XML from the controller.
func newVMXMLCommand(a *app) *cobra.Command {
	var domain bool
	var image, accel string
	var memoryMiB int64
	cmd := &cobra.Command{
		Use:   "xml NAME [--domain [--image DIR] [--memory MIB] [--accel kvm|tcg]]",
		Short: "Print a VM's libvirt XML from the controller: its <shmem> device, or a whole domain",
		Long: `Ask sluice-controller for VM NAME's libvirt XML, built (by vmm-plugin/libvirt,
as "sluicectl libvirt xml" builds it on the host) from the endpoint the VM's
host reported: the <shmem> device to paste into the domain's <devices> on that
host, or with --domain a whole domain that boots the guest image in --image
(a directory on the host) directly, with the device, the VM's volume and its
settings as metadata. A tenant gets its own VMs' only. Until the host has
created the VM (at its next sync) the controller answers 409 conflict.

--domain, --image, --memory and --accel are libvirt xml's flags (--whole is
the old name of --domain). --accel takes kvm or tcg, as vm start's (tcg is
libvirt's domain type qemu; the REST API's accel parameter), but not auto: the
controller cannot look at the host's CPU. --image names a directory on the VM's host, so $` + GuestImageEnv + `
(a path on this machine) is not its default.`,
		Example: `  sluicectl vm xml web
  sluicectl vm xml web --domain --memory 512 > web.xml   # then, on the VM's host: virsh define web.xml`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !domain {
				for _, name := range []string{"image", "memory", "accel"} {
					if cmd.Flags().Changed(name) {
						return usageErrorf("--%s needs --domain", name)
					}
				}
			}
			params := &controllerapi.GetVMDomainXMLParams{}
			if domain {
				params.Whole = &domain
				if cmd.Flags().Changed("image") {
					params.Image = &image
				}
				if cmd.Flags().Changed("memory") {
					params.MemoryMib = &memoryMiB
				}
				if cmd.Flags().Changed("accel") {
					if err := checkAccel(accel, false); err != nil {
						return err
					}
					acc := controllerapi.GetVMDomainXMLParamsAccel(accel)
					params.Accel = &acc
				}
			}
			cl, err := a.fleetClient()
			if err != nil {
				return err
			}
			res, err := cl.GetVMDomainXMLWithResponse(cmd.Context(), args[0], params)
			if _, err := answer[struct{}](res, nil, err); err != nil {
				return vmError(args[0], err)
			}
			_, err = cmd.OutOrStdout().Write(res.Body)
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&domain, "domain", false, "print a whole domain instead of the <shmem> device")
	cmdline.Alias(f, "whole", "domain", a.opts.Stderr)
	f.StringVar(&image, "image", "", "with --domain: the guest image directory on the VM's host (default the controller's, /var/lib/sluice/guest)")
	f.Int64Var(&memoryMiB, "memory", 0, "with --domain: guest memory in MiB (default 256)")
	f.StringVar(&accel, "accel", "", "with --domain: accelerator kvm or tcg (default kvm)")
	cmdline.Renamed(f, "type", "accel", "kvm or tcg; libvirt's domain type qemu is tcg")
	return cmd
}
