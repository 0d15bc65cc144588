// Command sluice-proxy serves one VM's GPU system calls, in a sandbox.
// sluiced starts it (proxy.Start), one per VM, and talks to it over the
// socket on fd 3 (mediator/internal/proxyproto); fd 4 is the VM heap's
// memfd, of which the proxy maps the range the flags name.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/internal/cmdline"
	"github.com/sluice-gpu/sluice/internal/cpuprofile"
	"github.com/sluice-gpu/sluice/mediator/internal/proxy"
	"github.com/sluice-gpu/sluice/mediator/internal/proxy/sandbox"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

var version = "dev"

const longHelp = `sluice-proxy serves one VM's GPU system calls in a sandbox.

sluiced starts it, one per VM, already inside new user, mount, network, PID,
IPC and UTS namespaces (or in --netns's network namespace, which sluiced
joins for it). Descriptors:
  3  the SOCK_SEQPACKET socket to sluiced (protocol: proxyproto; after
     Ready, sluiced sends the memfd of the request and result rings on it)
  4  the VM heap's memfd; the proxy maps [--heap-offset, +--heap-size)

Before serving it pivots into --volume (which becomes "/"), sets its resource
limits, no_new_privs, Landlock and a seccomp allowlist. On any setup failure
it sends sluiced a Fatal message with the reason and exits 1 (2 for a bad
command line).

Environment (diagnostics; sluiced's environment reaches its proxies):
  SLUICE_PROXY_CPU_PROFILE=PATH  write a Go CPU profile of the proxy's first
                                 SLUICE_PROXY_CPU_PROFILE_FOR (a duration,
                                 default 10s) to PATH.<vm>.<start ns>, created
                                 before the sandbox (sluiced stops a proxy with
                                 SIGKILL, so the profile ends on its own)

Durations are Go durations: 200us, 5ms.`

func main() { os.Exit(run(os.Args[1:])) }

type options struct {
	vm, volume        string
	heapOff, heapSize uint64
	maxFiles          uint64
	maxFileSize       uint64
	addressSpace      uint64
	spin, contextSpin time.Duration
	noSandbox         bool
	probe             string
	exeFD             int
}

// errHelp: --help or --version was given and answered.
var errHelp = errors.New("help given")

func parseFlags(args []string, stdout, stderr io.Writer) (options, error) {
	var o options
	ran := false
	root := cmdline.NewRoot(&cobra.Command{
		Use:   "sluice-proxy --vm NAME --volume DIR --heap-offset N --heap-size N",
		Short: "Serves one VM's GPU system calls in a sandbox (sluiced starts it)",
		Long:  longHelp,
		RunE:  func(*cobra.Command, []string) error { ran = true; return nil },
	}, version)
	o.addFlags(root.Flags())
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		return o, err
	}
	switch {
	case !ran:
		return o, errHelp
	case o.volume == "":
		return o, errors.New("--volume is required (see --help)")
	}
	if o.addressSpace == 0 {
		o.addressSpace = o.heapSize + 8<<30
	}
	return o, nil
}

// addFlags declares the proxy's flags, a line each.
func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.SortFlags = false
	fs.StringVar(&o.vm, "vm", "", "the VM's name (log messages)")
	fs.StringVar(&o.volume, "volume", "", "host directory that becomes the proxy's / (required)")
	fs.Uint64Var(&o.heapOff, "heap-offset", 0, "offset of the VM heap in fd 4")
	fs.Uint64Var(&o.heapSize, "heap-size", 0, "size of the VM heap in bytes (0: no heap, no fd 4)")
	fs.Uint64Var(&o.maxFiles, "max-files", 256, "RLIMIT_NOFILE: open files of all guest contexts together (EMFILE past it)")
	fs.Uint64Var(&o.maxFileSize, "max-file-size", 0, "RLIMIT_FSIZE in bytes (0: unlimited)")
	fs.Uint64Var(&o.addressSpace, "max-address-space", 0, "RLIMIT_AS in bytes (0: the heap plus 8 GiB for the Go runtime)")
	def := proxy.DefaultServeConfig()
	fs.DurationVar(&o.spin, "spin", def.Spin, "how long the receive loop watches the request ring after its last request before it sleeps on the socket (0: never spin; default 200µs with 4 processors or more, else 0)")
	fs.DurationVar(&o.contextSpin, "context-spin", def.ContextSpin, "how long an idle context thread watches its queue before it blocks (0: never spin; default 50µs with 4 processors or more, else 0)")
	fs.BoolVar(&o.noSandbox, "no-sandbox", false, "serve without confinement, in --volume (tests only)")
	fs.StringVar(&o.probe, "probe-syscall", "", "test helper: once sandboxed, make this forbidden call (mount, ptrace, execve, reboot, unshare-net, socket-netlink, socket-raw, socket-inet, setsockopt-ip, setsockopt-socket) and report its errno as Fatal")
	fs.IntVar(&o.exeFD, "exe-fd", -1, "a descriptor of this binary the parent executed it through (closed at once)")
}

func run(args []string) int {
	o, err := parseFlags(args, os.Stdout, os.Stderr)
	if err == errHelp {
		return 0
	}
	if o.exeFD > proxy.FDHeap {
		unix.Close(o.exeFD) // nothing of the host's stays open in the sandbox
	}
	conn, cerr := mediatorConn()
	if err != nil {
		return fatal(conn, err, 2)
	}
	if cerr != nil {
		return fatal(nil, cerr, 1)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("vm", o.vm)
	heap, err := mapHeap(o.heapOff, o.heapSize)
	if err != nil {
		return fatal(conn, err, 1)
	}
	if path := os.Getenv("SLUICE_PROXY_CPU_PROFILE"); path != "" {
		stop, err := proxyProfile(path, o.vm)
		if err != nil {
			return fatal(conn, err, 1)
		}
		defer stop()
	}
	cfg := proxy.DefaultServeConfig()
	cfg.Spin, cfg.ContextSpin = o.spin, o.contextSpin
	if o.noSandbox {
		cfg.Dir = o.volume
	} else {
		sc := sandbox.DefaultConfig(o.volume)
		sc.MaxFiles, sc.MaxFileSize, sc.AddressSpace = o.maxFiles, o.maxFileSize, o.addressSpace
		rep, err := sandbox.Enter(sc)
		if err != nil {
			return fatal(conn, fmt.Errorf("sandbox: %w", err), 1)
		}
		log.Info("sandboxed", "landlock_abi", rep.LandlockABI, "landlock_scoped", rep.LandlockScoped, "max_files", o.maxFiles, "max_file_size", o.maxFileSize)
	}
	if o.probe != "" {
		return fatal(conn, probe(o.probe), 1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := proxy.Serve(ctx, conn, heap, cfg); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}

// mediatorConn returns the socket on fd 3.
func mediatorConn() (*net.UnixConn, error) {
	f := os.NewFile(proxy.FDConn, "mediator")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("fd %d is not the mediator's socket: %w", proxy.FDConn, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("fd %d is not a UNIX socket", proxy.FDConn)
	}
	return uc, nil
}

// mapHeap maps the heap range of fd 4, shared, read/write, and closes fd 4.
func mapHeap(off, size uint64) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	defer unix.Close(proxy.FDHeap)
	page := uint64(unix.Getpagesize())
	base := off &^ (page - 1)
	m, err := unix.Mmap(proxy.FDHeap, int64(base), int(off-base+size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the heap (fd %d, %d bytes at %d): %w", proxy.FDHeap, size, off, err)
	}
	return m[off-base:], nil
}

// fatal tells the mediator why the proxy stops, and returns code.
func fatal(conn *net.UnixConn, err error, code int) int {
	fmt.Fprintln(os.Stderr, "sluice-proxy:", err)
	if conn != nil {
		_, _ = conn.Write(proxyproto.AppendFatal(nil, err.Error()))
	}
	return code
}

// probe makes a forbidden call for the sandbox tests: a call the seccomp
// policy kills never returns.
func probe(name string) error {
	var e syscall.Errno
	switch name {
	case "mount":
		_, _, e = unix.Syscall6(unix.SYS_MOUNT, 0, 0, 0, 0, 0, 0)
	case "ptrace":
		_, _, e = unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0, 0, 0, 0)
	case "execve":
		_, _, e = unix.Syscall(unix.SYS_EXECVE, 0, 0, 0)
	case "reboot":
		_, _, e = unix.Syscall6(unix.SYS_REBOOT, 0, 0, 0, 0, 0, 0)
	case "unshare-net":
		_, _, e = unix.Syscall(unix.SYS_UNSHARE, unix.CLONE_NEWNET, 0, 0)
	case "socket-netlink":
		_, _, e = unix.Syscall(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER)
	case "socket-raw":
		// Needs CAP_NET_RAW, which the sandbox dropped.
		_, _, e = unix.Syscall(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	case "socket-inet":
		_, _, e = unix.Syscall(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, 0)
	case "setsockopt-ip":
		// x_tables' IPT_SO_SET_REPLACE (64) on an IP socket.
		fd, _, se := unix.Syscall(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, 0)
		if se != 0 {
			return fmt.Errorf("probe %s: socket: errno %d", name, int(se))
		}
		var junk [64]byte
		_, _, e = unix.Syscall6(unix.SYS_SETSOCKOPT, fd, unix.SOL_IP, 64, uintptr(unsafe.Pointer(&junk[0])), uintptr(len(junk)), 0)
	case "setsockopt-socket":
		fd, _, se := unix.Syscall(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, 0)
		if se != 0 {
			return fmt.Errorf("probe %s: socket: errno %d", name, int(se))
		}
		one := int32(1)
		_, _, e = unix.Syscall6(unix.SYS_SETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, uintptr(unsafe.Pointer(&one)), 4, 0)
	default:
		return fmt.Errorf("probe %s: unknown", name)
	}
	return fmt.Errorf("probe %s: errno %d", name, int(e))
}

// proxyProfile starts the diagnostic CPU profile of SLUICE_PROXY_CPU_PROFILE:
// the file is created on the host, before the sandbox hides the host's
// paths, and the profile ends after SLUICE_PROXY_CPU_PROFILE_FOR.
func proxyProfile(path, vm string) (func(), error) {
	d := 10 * time.Second
	if v := os.Getenv("SLUICE_PROXY_CPU_PROFILE_FOR"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			return nil, fmt.Errorf("SLUICE_PROXY_CPU_PROFILE_FOR=%q: want a duration > 0 such as 10s", v)
		}
	}
	stop, err := cpuprofile.Start(fmt.Sprintf("%s.%s.%d", path, vm, time.Now().UnixNano()))
	if err != nil {
		return nil, err
	}
	time.AfterFunc(d, stop)
	return stop, nil
}
