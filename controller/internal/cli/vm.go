package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

func newVMCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vm",
		Short: "Create, inspect, change and delete VM endpoints; boot, use and stop their guests",
		Long: `Manage VM endpoints. Each VM gets an ivshmem endpoint socket that QEMU (or a
process guest) connects to, a weight for fair sharing of the GPU, an optional
cap (a hard maximum share, enforced under policy cap), and exact GPU-time
accounting that outlives the VM.`,
		Example: `  sluicectl vm create web --weight 2
  sluicectl vm list
  sluicectl vm set web --weight 4
  sluicectl vm usage web
  sluicectl vm start web && sluicectl vm exec web -- throttle --duration 5s --json
  sluicectl vm stop web
  sluicectl vm delete web`,
		Args: groupArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(
		newVMCreateCommand(a),
		newVMListCommand(a),
		newVMGetCommand(a),
		newVMSetCommand(a),
		newVMDeleteCommand(a),
		newVMUsageCommand(a),
		newVMStartCommand(a),
		newVMStopCommand(a),
		newVMExecCommand(a),
	)
	hookFleetVM(a, cmd)
	return cmd
}

func newVMCreateCommand(a *app) *cobra.Command {
	var req hostapi.CreateVMRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a VM endpoint and print its socket path",
		Long: `Create a VM endpoint named NAME and print the path of its ivshmem endpoint
socket on one line, so that a script can hand it to QEMU:

  -chardev socket,path=$(sluicectl vm create web),id=sluice0
  -device ivshmem-doorbell,chardev=sluice0,vectors=N

Flags left out take the daemon's defaults (weight 1, no cap, 4 channels, 256
ring entries, a 4 MiB region, no device memory quota). --memory bounds the
device memory the VM may hold at once (its buffers; on a GPU also its
modules, 4096 at most, and the local memory of the kernels it launched): an
ALLOC, module load or launch that would take it past the quota fails on its
channel with "no memory" (ERR_NO_MEMORY) and the VM goes on; FREE gives a
buffer's bytes back. Without it only the device's capacity bounds the VM. --max-command is the longest command the VM may run (1ms to
1h; default the daemon's, sluiced --max-command, 500ms unless set): a longer
THROTTLE fails with "too long" (ERR_TOO_LONG), and a command that runs on the
GPU past it (and a quarter) fails with "timed out" (ERR_TIMED_OUT) and ends
the VM's GPU work (cuda: its GPU worker is killed and a fresh one started;
its buffers and modules are lost). --owner names the user whose processes may
open the endpoint besides root and the daemon's own user: the user QEMU runs
as (libvirt on Debian: libvirt-qemu:kvm), or a process guest's. It is UID or
UID:GID, in numbers or names the daemon resolves on its host; with a group the
peer's gid must match too. Anyone else's connection is closed before it gets
the VM's memory and counted under "Refused peers" in vm get. Without --owner
only root and the daemon's user may open it. Use --json to print the whole VM
instead, including the number of MSI vectors the ivshmem device needs.`,
		Example: `  sluicectl vm create web
  sluicectl vm create batch --weight 4 --channels 8 --region-size 64MiB
  sluicectl vm create noisy --cap 25% --memory 8GiB
  sluicectl vm create train --max-command 2s
  sluicectl vm create guest1 --owner libvirt-qemu:kvm
  sluicectl vm create db --json`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkCreateFlags(cmd, req); err != nil {
				return err
			}
			req.Name = args[0]
			vm, err := a.client().CreateVM(cmd.Context(), req)
			if err != nil {
				return vmError(args[0], err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), vm)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), vm.Endpoint)
			return err
		},
	}
	f := cmd.Flags()
	f.Uint32Var(&req.Weight, "weight", 0, "share of the GPU relative to other VMs, 1 to 1000000 (daemon default 1)")
	f.Var(shareValue{&req.Cap}, "cap",
		"hard maximum share of the GPU under policy cap: a fraction or a percentage, e.g. 0.25 or 25% (default none)")
	f.IntVar(&req.Channels, "channels", 0, "number of command channels (daemon default 4)")
	f.IntVar(&req.RingEntries, "ring-entries", 0, "entries per channel ring (daemon default 256)")
	f.Var(sizeValue{&req.RegionSize}, "region-size",
		"shared-memory region size: bytes or with a KiB/MiB/GiB suffix, a power of two (daemon default 4MiB)")
	f.StringVar(&req.Volume, "volume", "", "host directory that is the root of the VM's GPU system calls and that its QEMU guest mounts over 9p (daemon default: STATE_DIR/volumes/NAME)")
	f.StringVar(&req.NetNS, "netns", "", "network namespace (/run/netns/NAME) the VM's syscall proxy joins for socket calls (default: an isolated one)")
	f.StringVar(&req.Cgroup, "cgroup", "", "cgroup v2 directory the VM's syscall proxy runs in, so its CPU is charged to the VM")
	f.Var(sizeValue{&req.Memory}, "memory",
		"device memory quota: bytes or with a KiB/MiB/GiB/TiB suffix, e.g. 8GiB; an ALLOC, module load or launch that takes the VM past it (buffers; on a GPU modules and kernels' local memory) fails with ERR_NO_MEMORY (default none: the device's capacity)")
	f.Var(maxCommandValue{&req.MaxCommandNs}, "max-command",
		"longest command the VM may run, e.g. 250ms (1ms..1h; default the daemon's): a longer THROTTLE fails with ERR_TOO_LONG, a command running past it with ERR_TIMED_OUT")
	f.StringVar(&req.Owner, "owner", "",
		"user whose processes may open the endpoint besides root and the daemon's: UID[:GID] or USER[:GROUP], e.g. libvirt-qemu:kvm (default none)")
	f.BoolVar(&asJSON, "json", false, "print the created VM as JSON instead of its endpoint path")
	return cmd
}

// checkCreateFlags rejects explicit zero or negative values, which the wire
// format would silently turn into daemon defaults.
func checkCreateFlags(cmd *cobra.Command, req hostapi.CreateVMRequest) error {
	f := cmd.Flags()
	if f.Changed("weight") && req.Weight == 0 {
		return usageErrorf("--weight must be at least 1")
	}
	if f.Changed("channels") && req.Channels <= 0 {
		return usageErrorf("--channels must be at least 1")
	}
	if f.Changed("ring-entries") && req.RingEntries <= 0 {
		return usageErrorf("--ring-entries must be at least 1")
	}
	if f.Changed("owner") && req.Owner == "" {
		return usageErrorf("--owner must name a user: UID[:GID] or USER[:GROUP]")
	}
	return nil
}

func newVMListCommand(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List VM endpoints",
		Long: `List the VM endpoints, sorted by name: NAME ID WEIGHT CAP CHANNELS STATE
PEERS ENDPOINT. CAP is the VM's hard maximum share of the GPU, "-" for none.
STATE is "waiting" until a guest connects, then "connected".`,
		Example: `  sluicectl vm list
  sluicectl vm list --json | jq -r '.[].name'`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			vms, err := a.client().ListVMs(cmd.Context())
			if err != nil {
				return fmt.Errorf("listing vms: %w", err)
			}
			if asJSON {
				if vms == nil {
					vms = []hostapi.VM{}
				}
				return writeJSON(cmd.OutOrStdout(), vms)
			}
			_, err = io.WriteString(cmd.OutOrStdout(), RenderVMTable(vms))
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the VMs as a JSON array")
	return cmd
}

func newVMGetCommand(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Describe one VM endpoint",
		Long: `Describe the VM endpoint NAME: its configuration (weight, cap and device
memory quota included), endpoint socket and state, the device memory its
buffers hold now, and its GPU system calls where it serves them.`,
		Example: `  sluicectl vm get web
  sluicectl vm get web --json`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			vm, err := a.client().GetVM(cmd.Context(), args[0])
			if err != nil {
				return vmError(args[0], err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), vm)
			}
			_, err = io.WriteString(cmd.OutOrStdout(), RenderVM(vm))
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the VM as JSON")
	return cmd
}

func newVMSetCommand(a *app) *cobra.Command {
	var req hostapi.UpdateVMRequest
	var weight uint32
	var capShare float64
	var window time.Duration
	var batch int
	var memory uint64
	var maxCommand int64
	var owner string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "set NAME [--weight W] [--cap SHARE] [--syscall-window D] [--syscall-batch N] [--memory SIZE] [--max-command D] [--owner UID[:GID]]",
		Short: "Change a running VM's weight, cap, system-call batching, memory quota, longest command or owner",
		Long: `Change the scheduling weight, the cap, the system-call batching or the device
memory quota of VM NAME while it runs, then print the VM as changed. Give at
least one of the flags; what is not given stays as it is. Weight and cap apply
from the scheduler's next period; weight, cap and memory quota are kept when
sluiced restarts.

--weight is the VM's share of the GPU relative to the other VMs' weights
(policy dfq; under timeslice, the periods its turn lasts). --cap is a hard maximum share of the GPU, as a fraction or a
percentage; it is enforced only under policy cap, where the GPU may idle
rather than let the VM exceed it. --cap 0 removes the cap.

--syscall-window and --syscall-batch tune how the VM's GPU system calls travel
to its proxy: calls found within the window of a batch's first call go
together, up to the batch size (1..1024). A window of 0 sends a batch as soon
as a scan finds no more calls. They apply to the next batch and last as long
as the VM's endpoint (sluiced --syscall-window/--syscall-batch set the
defaults).

--memory is the VM's new device memory quota (SIZE as for vm create; 0 or
"none" removes it). It applies to the VM's next command that takes device
memory (an ALLOC; on a GPU a module load, or a launch whose kernel needs more
local memory than any before). A quota below what the VM holds takes nothing
back: those commands fail with "no memory" until it has freed enough to be
under the quota ("vm get" shows the use).

--max-command is the VM's new longest command (as for vm create; "default"
returns it to the daemon's). It applies to the next commands the VM submits
and to the header its guest reads; on a GPU (cuda) to its commands running
too. It is kept when sluiced restarts. "vm get" shows it and how often the
VM's commands ran past it.

--owner is the VM's new owner (as for vm create; "none" removes it). It
applies to the connections that follow (guests connected stay) and is kept
when sluiced restarts.`,
		Example: `  sluicectl vm set web --weight 4
  sluicectl vm set batch --cap 0.25
  sluicectl vm set batch --cap 25%
  sluicectl vm set batch --cap 0            # remove the cap
  sluicectl vm set web --weight 2 --cap 50% --json
  sluicectl vm set web --syscall-window 20us --syscall-batch 64
  sluicectl vm set batch --memory 16GiB
  sluicectl vm set batch --memory none     # remove the quota
  sluicectl vm set train --max-command 5s
  sluicectl vm set train --max-command default
  sluicectl vm set guest1 --owner libvirt-qemu:kvm`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			if !f.Changed("weight") && !f.Changed("cap") && !f.Changed("syscall-window") && !f.Changed("syscall-batch") && !f.Changed("memory") && !f.Changed("max-command") && !f.Changed("owner") {
				return usageErrorf("nothing to change: give --weight, --cap, --syscall-window, --syscall-batch, --memory, --max-command or --owner")
			}
			if f.Changed("owner") {
				req.Owner = ownerOrNone(owner)
			}
			if f.Changed("max-command") {
				req.MaxCommandNs = &maxCommand
			}
			if f.Changed("memory") {
				req.Memory = &memory
			}
			if f.Changed("syscall-window") {
				ns := int64(window)
				req.SyscallWindowNs = &ns
			}
			if f.Changed("syscall-batch") {
				req.SyscallBatch = &batch
			}
			if f.Changed("weight") {
				if weight == 0 {
					return usageErrorf("--weight must be at least 1")
				}
				req.Weight = &weight
			}
			if f.Changed("cap") {
				req.Cap = &capShare
			}
			vm, err := a.client().UpdateVM(cmd.Context(), args[0], req)
			if err != nil {
				return vmError(args[0], err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), vm)
			}
			_, err = io.WriteString(cmd.OutOrStdout(), RenderVM(vm))
			return err
		},
	}
	f := cmd.Flags()
	f.Uint32Var(&weight, "weight", 0, "new share of the GPU relative to other VMs, 1 to 1000000")
	f.Var(shareValue{&capShare}, "cap", "new hard maximum share of the GPU under policy cap, e.g. 0.25 or 25%; 0 removes it")
	f.DurationVar(&window, "syscall-window", 0, "coalescing window of the VM's GPU system calls, e.g. 0, 20us, 1ms (at most 1s)")
	f.IntVar(&batch, "syscall-batch", 0, "most GPU system calls in one batch to the VM's proxy (1..1024)")
	f.Var(quotaValue{&memory}, "memory", "new device memory quota, e.g. 16GiB; 0 or none removes it")
	f.Var(maxCommandValue{&maxCommand}, "max-command", `new longest command the VM may run, e.g. 2s (1ms..1h); "default" returns it to the daemon's`)
	f.StringVar(&owner, "owner", "", `new user who may open the endpoint besides root and the daemon's, UID[:GID] or USER[:GROUP]; "none" removes it`)
	f.BoolVar(&asJSON, "json", false, "print the changed VM as JSON")
	return cmd
}

// ownerOrNone is --owner of vm set: "none" is no owner.
func ownerOrNone(s string) *string {
	if s == "none" {
		s = ""
	}
	return &s
}

func newVMDeleteCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Delete a VM endpoint (its usage stays on record)",
		Long: `Tear down the endpoint of VM NAME. A connected guest loses its GPU. The VM's
usage stays on record: "sluicectl vm usage NAME" still reports it.`,
		Example: `  sluicectl vm delete web`,
		Args:    argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.client().DeleteVM(cmd.Context(), args[0]); err != nil {
				return vmError(args[0], err)
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "vm %q deleted\n", clean(args[0]))
			return err
		},
	}
}

func newVMUsageCommand(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "usage NAME",
		Short: "Show a VM's cumulative GPU time and command counts",
		Long: `Show the cumulative usage of VM NAME since the time printed as "since": GPU
busy time of its commands (exact, in nanoseconds), kernels (THROTTLE and
LAUNCH commands) completed, all commands completed, and errors (commands
failed and records rejected). This is billing data: it survives daemon
restarts and VM deletion. --json prints the daemon's usage object.`,
		Example: `  sluicectl vm usage web
  sluicectl vm usage web --json | jq .gpu_ns`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := a.client().Usage(cmd.Context(), args[0])
			if err != nil {
				return vmError(args[0], err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), u)
			}
			_, err = io.WriteString(cmd.OutOrStdout(), RenderUsage(u))
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the usage object as JSON")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing json: %w", err)
	}
	return nil
}
