package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/guest-agent/control"
	"github.com/sluice-gpu/sluice/vmm-plugin/qemu"
)

// GuestImageEnv names the environment variable for the default guest image
// directory (make guest-image writes build/guest).
const GuestImageEnv = "SLUICE_GUEST_IMAGE"

// defaultGuestImage is used when neither --image nor $SLUICE_GUEST_IMAGE is given.
const defaultGuestImage = "build/guest"

// guestFlags are the flags every guest verb shares.
type guestFlags struct {
	runDir string
}

func (g *guestFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&g.runDir, "run-dir", "", "directory holding the guests' run directories (default: guests/ beside --socket)")
}

// dir is the run directory of guest name.
func (g *guestFlags) dir(a *app, name string) (string, error) {
	if !hostapi.ValidName(name) {
		return "", usageErrorf("vm name %q: want 1-63 of letters, digits, '.', '_', '-', starting with a letter or digit", clean(name))
	}
	base := g.runDir
	if base == "" {
		base = filepath.Join(filepath.Dir(a.socket), "guests")
	}
	abs, err := filepath.Abs(filepath.Join(base, name))
	if err != nil {
		return "", err
	}
	return abs, nil
}

func newVMStartCommand(a *app) *cobra.Command {
	var (
		g            guestFlags
		image, accel string
		memory       int
		agentArgs    string
		wait         time.Duration
		hotplug      bool
		iommu        bool
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   "start NAME",
		Short: "Boot a QEMU guest attached to VM NAME's endpoint",
		Long: `Boot a QEMU guest for VM NAME with its ivshmem-doorbell device on the VM's
endpoint (the VM is created with the daemon's defaults if it does not exist,
owned by the user running sluicectl, as whom QEMU runs), and wait until the guest's agent answers on its control port. The guest runs
in the background; "sluicectl vm exec NAME -- ..." runs workloads in it and
"sluicectl vm stop NAME" powers it off.

The guest boots the kernel and initramfs of --image (make guest-image) with
KVM where the CPU has vmx or svm and /dev/kvm opens, else under TCG (about
2.5 s to the agent). Its console goes to RUN_DIR/serial.log. The VM's volume
(the directory its GPU system calls see as their root, "volume" in vm get)
is shared with the guest over virtio-9p and mounted at /volume there.

The guest's agent polls for completions unless it can take the device's
MSI-X interrupts: --iommu boots a q35 machine with a virtual IOMMU, where the
guest binds the device to vfio-pci and its agent sleeps until the mediator
signals (a q35 guest takes no --hotplug).`,
		Example: `  sluicectl vm start web
  sluicectl vm start web --memory 512 --image /usr/share/sluice/guest
  sluicectl vm start web --hotplug     # boot without the device, hot-plug it through QMP once the agent answers
  sluicectl vm start web --iommu       # completions as interrupts in the guest (vfio-pci behind a virtual IOMMU)`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			runDir, err := g.dir(a, name)
			if err != nil {
				return err
			}
			if err := checkAccel(accel, true); err != nil {
				return err
			}
			if image, err = filepath.Abs(a.guestImage(image)); err != nil {
				return err
			}
			for _, f := range []string{"vmlinux", "initramfs.gz"} {
				if _, err := os.Stat(filepath.Join(image, f)); err != nil {
					return fmt.Errorf("guest image %s: %w (build it with make guest-image, or give --image DIR)", image, err)
				}
			}
			ctx := cmd.Context()
			c := a.client()
			vm, err := c.GetVM(ctx, name)
			if errors.Is(err, hostapi.ErrNotFound) {
				vm, err = c.CreateVM(ctx, hostapi.CreateVMRequest{Name: name, Owner: invokingOwner()})
			}
			if err != nil {
				return vmError(name, err)
			}
			cfg := qemu.Config{
				Name:     name,
				Accel:    accel,
				Kernel:   filepath.Join(image, "vmlinux"),
				Initrd:   filepath.Join(image, "initramfs.gz"),
				Append:   qemu.DefaultAppend + " sluice.agent=" + agentArgs,
				MemoryMB: memory,
				Volume:   vm.Volume, // "": the daemon gave the VM none; no 9p device
				IOMMU:    iommu,
				RunDir:   runDir,
			}
			if iommu && hotplug {
				return usageErrorf("--iommu and --hotplug exclude each other: a q35 root bus takes no hot-plugged device")
			}
			if !hotplug {
				cfg.Endpoint, cfg.Vectors = vm.Endpoint, vm.Vectors
			}
			began := time.Now()
			inst, err := qemu.Start(ctx, cfg)
			if err != nil {
				return vmError(name, err)
			}
			agent := ""
			if wait > 0 {
				wctx, cancel := context.WithTimeout(ctx, wait)
				ctl, err := control.Dial(wctx, cfg.ControlSocket())
				cancel()
				if err != nil {
					return vmError(name, fmt.Errorf("guest started (pid %d) but %w; see %s", inst.PID, err, cfg.SerialLog()))
				}
				agent = ctl.Agent()
				ctl.Close()
			}
			if hotplug { // into the running guest, once its agent answers
				if err := inst.AttachEndpoint(ctx, vm.Endpoint, vm.Vectors); err != nil {
					return vmError(name, fmt.Errorf("guest started (pid %d) but %w", inst.PID, err))
				}
			}
			st := guestStatus{Name: name, PID: inst.PID, Accel: inst.Accel, RunDir: runDir, Endpoint: vm.Endpoint,
				Volume: vm.Volume, Agent: agent, SerialLog: cfg.SerialLog(), BootSeconds: time.Since(began).Seconds()}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "vm %q started: pid %d, %s, endpoint %s\n", name, st.PID, st.Accel, st.Endpoint)
			if st.Volume != "" {
				fmt.Fprintf(w, "volume %s at /volume in the guest\n", st.Volume)
			}
			if agent != "" {
				fmt.Fprintf(w, "agent %s answering after %.1f s\n", agent, st.BootSeconds)
			}
			_, err = fmt.Fprintf(w, "console log %s\n", st.SerialLog)
			return err
		},
	}
	g.add(cmd)
	f := cmd.Flags()
	f.StringVar(&image, "image", "", "guest image directory with vmlinux and initramfs.gz (env "+GuestImageEnv+", default "+defaultGuestImage+")")
	f.IntVar(&memory, "memory", qemu.DefaultMemoryMB, "guest memory in MiB")
	f.StringVar(&accel, "accel", qemu.AccelAuto, accelHelp+" (auto: and /dev/kvm opens)")
	f.StringVar(&agentArgs, "agent", "--device,serve", "the guest agent's command line, comma-separated (the kernel's sluice.agent=)")
	f.DurationVar(&wait, "wait", time.Minute, "wait this long for the agent to answer (0: do not wait)")
	f.BoolVar(&hotplug, "hotplug", false, "boot without the Sluice device and hot-plug it through QMP (chardev-add + device_add) into the running guest")
	f.BoolVar(&iommu, "iommu", false, "give the guest a virtual IOMMU (q35 + intel-iommu), so that its agent takes completions as MSI-X interrupts through vfio-pci instead of polling")
	f.BoolVar(&asJSON, "json", false, "print the started guest as JSON")
	return cmd
}

// guestStatus is what vm start reports.
type guestStatus struct {
	Name        string  `json:"name"`
	PID         int     `json:"pid"`
	Accel       string  `json:"accel"`
	RunDir      string  `json:"run_dir"`
	Endpoint    string  `json:"endpoint"`
	Volume      string  `json:"volume,omitempty"` // shared with the guest at /volume
	Agent       string  `json:"agent,omitempty"`
	SerialLog   string  `json:"serial_log"`
	BootSeconds float64 `json:"boot_seconds"`
}

func newVMStopCommand(a *app) *cobra.Command {
	var (
		g     guestFlags
		grace time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stop NAME",
		Short: "Power off the QEMU guest of VM NAME",
		Long: `Press the guest's power button (QMP system_powerdown): its init stops the agent
and powers off. A guest still running after --grace is told to quit (QMP quit),
and killed 5 s after that. The VM endpoint and its usage stay ("sluicectl vm
delete NAME" removes the endpoint).`,
		Example: `  sluicectl vm stop web
  sluicectl vm stop web --grace 2s`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			runDir, err := g.dir(a, args[0])
			if err != nil {
				return err
			}
			inst, err := qemu.Find(runDir)
			if err != nil {
				return vmError(args[0], err)
			}
			inst.Config.Name = args[0]
			how, err := inst.Stop(cmd.Context(), grace)
			if err != nil {
				return vmError(args[0], err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "vm %q stopped (%s)\n", args[0], how)
			return err
		},
	}
	g.add(cmd)
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Second, "how long the guest gets to power off before QEMU is told to quit")
	return cmd
}

func newVMExecCommand(a *app) *cobra.Command {
	var (
		g       guestFlags
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "exec NAME -- AGENT-ARGS...",
		Short: "Run a guest-agent command in VM NAME's guest and print its output",
		Long: `Run sluice-agent with AGENT-ARGS inside the running guest of VM NAME (through
the guest's control port, its second serial line) and print what it printed;
sluicectl exits with the agent's exit status. The arguments are the agent's
own ("sluice-agent --help" in the guest image): workloads run on the guest's
ivshmem device. A "run" may leave out the word run: "vm exec web -- throttle
..." is "vm exec web -- run throttle ...".`,
		Example: `  sluicectl vm exec web -- info
  sluicectl vm exec web -- throttle --kernel 100us --depth 32 --duration 10s --json
  sluicectl vm exec web -- run latency --count 10000 --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 || cmd.ArgsLenAtDash() != 1 {
				return usageErrorf("want NAME -- AGENT-ARGS..., e.g. vm exec web -- info")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			runDir, err := g.dir(a, args[0])
			if err != nil {
				return err
			}
			if _, err := qemu.Find(runDir); err != nil {
				return vmError(args[0], err)
			}
			agentArgs := args[1:]
			switch agentArgs[0] {
			case "throttle", "latency":
				agentArgs = append([]string{"run"}, agentArgs...)
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			ctl, err := control.Dial(dctx, filepath.Join(runDir, "control.sock"))
			cancel()
			if err != nil {
				return vmError(args[0], err)
			}
			defer ctl.Close()
			resp, err := ctl.Exec(ctx, agentArgs...)
			if err != nil {
				return vmError(args[0], err)
			}
			io.WriteString(cmd.OutOrStdout(), resp.Stdout)
			io.WriteString(cmd.ErrOrStderr(), resp.Stderr)
			if resp.Exit != 0 {
				return exitCode(resp.Exit)
			}
			return nil
		},
	}
	g.add(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up waiting for the result after this long (0: no limit)")
	return cmd
}

// exitCode passes a guest command's exit status through as sluicectl's,
// with nothing more printed: the command printed its own message.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
