package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/transport/pci"
	"github.com/sluice-gpu/sluice/guest-agent/transport/process"
)

// deviceAuto is --device without an address: the first ivshmem device.
const deviceAuto = "auto"

// globals are the root command's persistent flags.
type globals struct {
	endpoint       string
	device         string
	vectors        int
	sysfs          string
	connectTimeout time.Duration
	stall          time.Duration
	poll           sdk.Poll
	out            io.Writer
}

func newRootCmd(out io.Writer) *cobra.Command {
	g := &globals{out: out, poll: sdk.DefaultPoll()}
	root := &cobra.Command{
		Use:   "sluice-agent",
		Short: "Sluice guest agent: submit GPU work through a Sluice endpoint",
		Long: `sluice-agent is the guest side of Sluice. It opens the shared region of a
Sluice endpoint and submits command records to its channels.

Choose how to reach the region:
  --endpoint SOCKET   process-guest mode: join the VM endpoint's ivshmem server
                      socket from a host process, as QEMU would
  --device[=ADDR]     device mode, inside a VM: use the ivshmem PCI device
                      (the first one, or the one at PCI address ADDR)`,
		Example: `  sluice-agent --endpoint /run/sluice/vm1.sock info
  sluice-agent --endpoint /run/sluice/vm1.sock run throttle --kernel 1ms --sleep 500us --duration 10s
  sluice-agent --device run latency --count 10000 --json`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE:          func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetOut(out)
	// --version prints "sluice-agent VERSION", as every Sluice binary's
	// does; declared here so that cobra adds no -v shorthand.
	root.Version = version
	root.Flags().Bool("version", false, "print the version and exit")
	root.SetVersionTemplate("sluice-agent {{.Version}}\n")
	root.CompletionOptions.HiddenDefaultCmd = true
	f := root.PersistentFlags()
	f.StringVar(&g.endpoint, "endpoint", "", "process-guest mode: the endpoint's ivshmem server `SOCKET`")
	f.StringVar(&g.device, "device", "", "device mode: use the ivshmem PCI device (optionally `ADDR`, e.g. --device=0000:00:04.0)")
	f.Lookup("device").NoOptDefVal = deviceAuto
	f.IntVar(&g.vectors, "vectors", 0, "process-guest mode: doorbell vectors to join with (channels + 2; 0 learns it from the endpoint)")
	f.StringVar(&g.sysfs, "sysfs", pci.DefaultSysfsRoot, "device mode: where sysfs is mounted")
	f.DurationVar(&g.connectTimeout, "connect-timeout", 10*time.Second,
		"bound on joining the endpoint (process guest), or on the ivshmem device showing in sysfs (in a VM: a hot-plugged one shows once the guest's kernel has added it)")
	f.DurationVar(&g.stall, "mediator-timeout", defaultStall,
		"give up when the mediator's heartbeat (once a second) stands still this long (0: never); a process guest also gives up at once when the endpoint's connection closes")
	f.DurationVar(&g.poll.Spin, "spin", g.poll.Spin, "completion polling: busy-poll this long before yielding")
	f.DurationVar(&g.poll.Yield, "yield", g.poll.Yield, "completion polling: then yield the CPU between polls this long")
	f.DurationVar(&g.poll.MaxSleep, "max-sleep", g.poll.MaxSleep, "completion polling: then sleep between polls, at most this long")
	f.DurationVar(&g.poll.WakeSpin, "wake-spin", g.poll.WakeSpin, "busy-poll this long, then sleep until the mediator signals the completion (replaces --spin/--yield/--max-sleep where the host wakes guests: process guests, and VMs whose device is bound to vfio-pci)")
	f.BoolVar(&g.poll.NoWake, "no-wake", false, "poll for completions (--spin, --yield, --max-sleep) even where the host would wake the guest")
	root.AddCommand(newInfoCmd(g), newRunCmd(g), newServeCmd(g), newFSCmd(g), newContextCmd(g), newFastcallCmd(g))
	return root
}

// defaultStall is --mediator-timeout: longer than the pause of a
// hand-over or of a restart through the fd store, in which the heartbeat
// stands still (mostly well under a second; sdk.Device.Watch gives its
// bounds, under 20 s with sluiced's default hand-over wait).
const defaultStall = 30 * time.Second

// open reaches the region the flags name, opens it and watches its
// mediator (sdk.Device.Watch): cmd's context is cancelled if the mediator
// goes away. finish ends the watch and closes the device; it returns the
// error of cmd's work, or that the mediator went away if that cut the work
// short.
func (g *globals) open(cmd *cobra.Command) (d *sdk.Device, finish func(error) error, err error) {
	if g.stall < 0 {
		return nil, nil, fmt.Errorf("--mediator-timeout %v: must not be negative (0: never give up)", g.stall)
	}
	d, err = g.openRegion(cmd.Context())
	if err != nil {
		return nil, nil, err
	}
	ctx, stop := d.Watch(cmd.Context(), g.stall)
	cmd.SetContext(ctx)
	return d, func(err error) error {
		err = sdk.Gone(ctx, err)
		stop()
		return errors.Join(err, d.Close())
	}, nil
}

// openRegion reaches the region the flags name and opens it.
func (g *globals) openRegion(ctx context.Context) (*sdk.Device, error) {
	var (
		t   sdk.Transport
		err error
	)
	switch {
	case g.endpoint != "" && g.device != "":
		return nil, errors.New("--endpoint and --device are exclusive: choose one")
	case g.endpoint != "":
		dctx, cancel := context.WithTimeout(ctx, g.connectTimeout)
		t, err = process.Dial(dctx, g.endpoint, g.vectors)
		cancel()
	case g.device != "":
		opts := pci.Options{SysfsRoot: g.sysfs, Wait: g.connectTimeout}
		if g.device != deviceAuto {
			opts.Address = g.device
		}
		t, err = openDevice(opts)
	default:
		return nil, errors.New("no region to open: give --endpoint SOCKET (process guest) or --device (in a VM)")
	}
	if err != nil {
		return nil, err
	}
	d, err := sdk.Open(t, sdk.WithPoll(g.poll))
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("opening region: %w", err)
	}
	return d, nil
}

// noInterrupts says once per process that the device's waiters poll.
var noInterrupts sync.Once

// openDevice opens the ivshmem device through VFIO, whose MSI-X vectors
// wake waiters, or else through sysfs, and then its waiters poll.
func openDevice(opts pci.Options) (sdk.Transport, error) {
	w, err := pci.OpenVFIO(opts)
	if err == nil {
		return w, nil
	}
	if !errors.Is(err, pci.ErrNoInterrupts) {
		return nil, err
	}
	noInterrupts.Do(func() { fmt.Fprintf(os.Stderr, "sluice-agent: polling for completions: %v\n", err) })
	return pci.Open(opts)
}

// peerID is this guest's peer id where the transport knows it.
func peerID(t any) (uint16, bool) {
	if p, ok := t.(interface{ ID() uint16 }); ok {
		return p.ID(), true
	}
	return 0, false
}
