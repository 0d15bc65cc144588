// Package hook is Sluice's libvirt qemu hook: when a domain with a Sluice
// <shmem> device is about to start, it creates the domain's VM endpoint in
// sluiced (QEMU connects to the endpoint synchronously, so it must exist
// first), and when the domain has stopped, it deletes the endpoint again.
//
// libvirt runs the hook as HOOK DOMAIN OPERATION SUBOP EXTRA with the domain
// XML on stdin, waits for it, and aborts a start whose prepare hook exits
// non-zero, showing its stderr. The hook never writes to stdout: for some
// operations (migrate, restore) libvirt would take that as replacement XML.
package hook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/internal/cmdline"
	"github.com/sluice-gpu/sluice/vmm-plugin/libvirt"
)

// Version is the hook's version; the binary's main sets it.
var Version = "dev"

// Exit codes.
const (
	ExitOK    = 0 // done, or nothing to do
	ExitError = 1 // failed; libvirt aborts a start and shows the message
	ExitUsage = 2 // bad command line
)

// Defaults of the flags.
const (
	DefaultSocket  = "/run/sluice/sluiced.sock"
	SocketEnv      = "SLUICE_SOCKET"
	DefaultTimeout = 10 * time.Second
)

// API is the part of sluiced's host API the hook uses.
type API interface {
	CreateVM(ctx context.Context, req hostapi.CreateVMRequest) (hostapi.VM, error)
	GetVM(ctx context.Context, name string) (hostapi.VM, error)
	DeleteVM(ctx context.Context, name string) error
}

var _ API = (*hostapi.Client)(nil)

// env is what a handler works with.
type env struct {
	api       API
	qemuUser  string // --qemu-user: "" to find it (qemuUID)
	qemuConf  string // --qemu-conf
	domainXML []byte // as libvirt passed it
}

// handler acts on one operation of one domain.
type handler func(ctx context.Context, e *env, name string, d libvirt.Domain) error

// volumeAccess grants QEMU's user access to a volume; tests replace it.
var volumeAccess = grantVolume

// handlers maps "OPERATION SUBOP" to what the hook does; every other
// operation is accepted and ignored.
var handlers = map[string]handler{
	"prepare begin": prepare,
	"release end":   release,
}

const longHelp = `sluice-libvirt-hook is the libvirt qemu hook for Sluice GPU VMs.

libvirt runs it as HOOK DOMAIN OPERATION SUBOP EXTRA, the domain XML on
stdin; flags come before DOMAIN (everything from DOMAIN on is positional).
For a domain with a Sluice device, <shmem name='sluice'> of model
ivshmem-doorbell (print one with "sluicectl libvirt xml NAME"):
  prepare begin  creates the VM NAME=DOMAIN in sluiced, with the settings of
                 <metadata><sluice:vm .../></metadata>, owned by the user QEMU
                 runs as (--qemu-user, else the domain's static DAC
                 <seclabel>, else user= in --qemu-conf, else libvirt-qemu or
                 qemu, whichever exists): only QEMU's user (and root, and
                 sluiced's) may open its endpoint; or accepts the VM if it
                 exists, making QEMU's user the owner of one without (the
                 fleet agent creates them so) and refusing one owned by
                 another user; then checks that
                 the device's <server path> is the VM's endpoint and its
                 <msi vectors> are enough; when the domain shares the VM's
                 volume (<filesystem> sluice-volume), grants QEMU's user
                 access to the volume's root with POSIX ACLs: u:USER:rwx,
                 also as default ACL. A failure aborts the start of the
                 domain.
  release end    deletes the VM if the device points at it (its usage stays
                 on record in sluiced).
Every other operation, and every domain without a Sluice device, is left
alone.

Installation (libvirt 6.5 or later runs every executable in qemu.d/):
  deploy/install-libvirt-hook.sh --bin /usr/local/bin/sluice-libvirt-hook \
      --socket /run/sluice/sluiced.sock
installs /etc/libvirt/hooks/qemu.d/sluice, a wrapper that runs this binary
with --socket (libvirt scrubs the environment of hooks down to PATH, HOME and
a few more, so $` + SocketEnv + ` does not reach it). Restart libvirtd (or
virtqemud) after installing the first hook: it looks for hooks only when it
starts.

Environment (defaults of the flags named; flags win):
  ` + SocketEnv + `  --socket

Exit status: 0 done or nothing to do, 1 failed (libvirt aborts a start), 2
on a bad command line.`

// hookArgs are libvirt's positional arguments; EXTRA is optional.
func hookArgs(_ *cobra.Command, args []string) error {
	if len(args) < 3 {
		return errors.New("want DOMAIN OPERATION SUBOP [EXTRA] as libvirt passes them (see --help)")
	}
	return nil
}

// Run runs the hook with args (the command line without the program name)
// and returns its exit code. api is the host API to use; nil connects to
// --socket. Only --version and --help write to stdout.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, api API) int {
	var o options
	root := cmdline.NewRoot(&cobra.Command{
		Use:     "sluice-libvirt-hook [flags] DOMAIN OPERATION SUBOP [EXTRA]",
		Short:   "libvirt qemu hook for Sluice GPU VMs",
		Long:    longHelp,
		Example: "  sluice-libvirt-hook --socket /run/sluice/sluiced.sock web prepare begin - < web.xml",
		Args:    hookArgs,
		RunE: cmdline.Checked(o.check, func(ctx context.Context) error {
			return o.run(ctx, stdin, api)
		}),
	}, Version)
	o.addFlags(root.Flags(), os.Getenv)
	root.Flags().SetInterspersed(false) // a domain or EXTRA is never a flag
	root.PreRun = func(_ *cobra.Command, a []string) { o.args = a }
	return cmdline.Execute(ctx, root, args, stdout, stderr)
}

// options are the hook's command line.
type options struct {
	socket, qemuUser, qemuConf string
	timeout                    time.Duration
	args                       []string // DOMAIN OPERATION SUBOP [EXTRA]
}

func (o *options) addFlags(fs *pflag.FlagSet, getenv func(string) string) {
	fs.StringVar(&o.socket, "socket", cmdline.Env(getenv, SocketEnv, DefaultSocket), "sluiced's host API socket (env "+SocketEnv+")")
	fs.DurationVar(&o.timeout, "timeout", DefaultTimeout, "time allowed for the calls to sluiced")
	fs.StringVar(&o.qemuUser, "qemu-user", "", "user libvirt runs QEMU as, a name or +UID (default: from the domain or --qemu-conf)")
	fs.StringVar(&o.qemuConf, "qemu-conf", DefaultQEMUConf, "libvirt's QEMU driver configuration, read for user=")
}

func (o *options) check(*pflag.FlagSet) error {
	if o.timeout <= 0 {
		return errors.New("--timeout must be positive")
	}
	return nil
}

// run handles the operation libvirt named.
func (o *options) run(ctx context.Context, stdin io.Reader, api API) error {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	name, op := o.args[0], o.args[1]+" "+o.args[2]
	h, ok := handlers[op]
	if !ok {
		// Drain what libvirt writes so that it never sees a broken pipe.
		_, _ = io.Copy(io.Discard, io.LimitReader(stdin, libvirt.MaxDomainXML))
		return nil
	}
	if api == nil {
		api = hostapi.NewClient(o.socket)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := dispatch(ctx, &env{api: api, qemuUser: o.qemuUser, qemuConf: o.qemuConf}, h, name, stdin); err != nil {
		return fmt.Errorf("%s: %s", op, oneLine(describe(err, o.socket, name)))
	}
	return nil
}

func dispatch(ctx context.Context, e *env, h handler, name string, stdin io.Reader) error {
	d, data, err := libvirt.ReadDomain(stdin)
	e.domainXML = data
	if err != nil {
		// The hook runs for every domain on the host: one that the small
		// model cannot read is not stopped unless it is Sluice's.
		if !strings.Contains(string(data), libvirt.ShmemModel) {
			return nil
		}
		return fmt.Errorf("domain %q: %w", name, err)
	}
	return h(ctx, e, name, d)
}

// sluiceDevice returns the Sluice device of d; ok is false for a domain that
// does not use Sluice, which the hook leaves alone.
func sluiceDevice(name string, d libvirt.Domain) (dev libvirt.DomainShmem, ok bool, err error) {
	dev, ok = libvirt.SluiceShmem(d)
	if ok && d.Name != "" && d.Name != name {
		// The VM is named after the domain: do not guess which name is right.
		return dev, ok, fmt.Errorf("libvirt named domain %q but its xml names %q", name, d.Name)
	}
	return dev, ok, nil
}

// prepare creates the VM of a Sluice domain and checks the device against it.
func prepare(ctx context.Context, e *env, name string, d libvirt.Domain) error {
	api := e.api
	dev, ok, err := sluiceDevice(name, d)
	if !ok || err != nil {
		return err
	}
	set, err := libvirt.SluiceSettings(d)
	if err != nil {
		return fmt.Errorf("domain %q: %w", name, err)
	}
	volume, _ := libvirt.SluiceVolume(d) // "": the daemon's default
	owner, err := qemuOwner(e, name)
	if err != nil {
		return err
	}
	vm, err := api.CreateVM(ctx, hostapi.CreateVMRequest{
		Name: name, Weight: set.Weight, Cap: set.Cap, Channels: set.Channels,
		RingEntries: set.RingEntries, RegionSize: set.RegionSize, Volume: volume,
		Owner: owner,
	})
	created := err == nil
	if errors.Is(err, hostapi.ErrExists) {
		vm, err = api.GetVM(ctx, name)
	}
	if err != nil {
		return fmt.Errorf("creating vm %q in sluiced: %w", name, err)
	}
	err = checkDevice(name, dev, vm)
	if err == nil {
		err = ensureOwner(ctx, api, name, owner, vm, created)
	}
	if err == nil && volume != "" && filepath.Clean(volume) != filepath.Clean(vm.Volume) {
		// The guest would see other files than the VM's GPU system calls.
		err = fmt.Errorf("domain %q: <filesystem> shares %q as %s, but the vm's volume is %q: regenerate the domain with 'sluicectl libvirt xml %s --domain'",
			name, volume, libvirt.VolumeTag, vm.Volume, name)
	}
	if err == nil && volume != "" {
		err = grantQEMU(e, name, vm.Volume)
	}
	if err != nil {
		if created {
			if derr := api.DeleteVM(ctx, name); derr != nil && !errors.Is(derr, hostapi.ErrNotFound) {
				return fmt.Errorf("%w (and deleting the vm again failed: %v)", err, derr)
			}
		}
		return err
	}
	return nil
}

// grantQEMU lets the user libvirt runs the domain's QEMU as open the VM's
// volume: its root belongs to the VM's sandbox id range (mode 0750), which
// QEMU, as libvirt-qemu on Debian, could not open for the 9p device.
func grantQEMU(e *env, name, volume string) error {
	uid, who, err := qemuUID(e.qemuUser, e.qemuConf, e.domainXML)
	if err != nil {
		return fmt.Errorf("domain %q: %w", name, err)
	}
	if uid == 0 {
		return nil // root needs no grant
	}
	if err := volumeAccess(volume, uid); err != nil {
		return fmt.Errorf("domain %q: letting QEMU's user, %s, uid %d, use the vm's volume: %w", name, who, uid, err)
	}
	return nil
}

// checkDevice makes sure QEMU will reach vm through dev: the server is the
// VM's endpoint and there are enough MSI vectors for its channels.
func checkDevice(name string, dev libvirt.DomainShmem, vm hostapi.VM) error {
	var problem string
	var path string
	var vectors uint
	if dev.Server != nil {
		path = dev.Server.Path
	}
	if dev.MSI != nil {
		vectors = dev.MSI.Vectors
	}
	switch {
	case path == "" || filepath.Clean(path) != filepath.Clean(vm.Endpoint):
		problem = fmt.Sprintf("<server path=%q>, but the vm's endpoint is %q", path, vm.Endpoint)
	case vm.Vectors > 0 && vectors < uint(vm.Vectors):
		problem = fmt.Sprintf("<msi vectors='%d'>, but the vm needs %d", vectors, vm.Vectors)
	default:
		return nil
	}
	return fmt.Errorf("domain %q: device <shmem name=%q> has %s: regenerate it with 'sluicectl libvirt xml %s' and put it in the domain (virsh edit %s)",
		name, dev.Name, problem, name, name)
}

// release deletes the VM of a Sluice domain; one already gone is fine.
// libvirt also runs release after a failed prepare, so a VM that the
// domain's device does not point at (the operator's, refused by prepare) is
// left alone.
func release(ctx context.Context, e *env, name string, d libvirt.Domain) error {
	api := e.api
	dev, ok, err := sluiceDevice(name, d)
	if !ok || err != nil {
		return err
	}
	vm, err := api.GetVM(ctx, name)
	if errors.Is(err, hostapi.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up vm %q in sluiced: %w", name, err)
	}
	if dev.Server == nil || filepath.Clean(dev.Server.Path) != filepath.Clean(vm.Endpoint) {
		return nil
	}
	if err := api.DeleteVM(ctx, name); err != nil && !errors.Is(err, hostapi.ErrNotFound) {
		return fmt.Errorf("deleting vm %q in sluiced: %w", name, err)
	}
	return nil
}

// describe turns an unreachable or slow daemon into one sentence naming the
// socket, instead of the transport chain.
func describe(err error, socket, name string) string {
	var oe *net.OpError
	switch {
	case errors.Is(err, hostapi.ErrUnavailable) && errors.As(err, &oe):
		return fmt.Sprintf("domain %q: cannot reach sluiced at %s (%v): is it running? (the hook's --socket is set in %s)",
			name, socket, oe.Err, "/etc/libvirt/hooks/qemu.d/sluice")
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("%v (sluiced at %s did not answer in time; see --timeout)", err, socket)
	}
	return err.Error()
}

// oneLine keeps the message on one line for libvirt's error report.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
