package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// The sluice-proxy binary's descriptors.
const (
	FDConn = 3 // the SOCK_SEQPACKET end to the mediator
	FDHeap = 4 // the VM heap's memfd
)

// UIDRange is the size of a sandbox's uid and gid map: 0..65535 inside.
const UIDRange = 65536

// DefaultUIDBase is the host uid (and gid) that is root inside the sandbox
// of the VM with index vmIndex: 100000 + 65536×vmIndex, so that no two VMs
// share ids and none maps host root.
func DefaultUIDBase(vmIndex int) uint32 { return 100000 + UIDRange*uint32(vmIndex) }

// StartConfig says how to start a VM's proxy.
type StartConfig struct {
	Binary string // path of sluice-proxy; required
	VM     string // the VM's name (messages)
	// Volume is the host directory that is the proxy's "/". Created if
	// missing; chowned to UIDBase (the sandbox's root) so that the sandbox
	// can write it. Its ancestors must be searchable by others (o+x). A
	// symbolic link is refused (sandbox.OpenVolume says why).
	Volume string
	// HeapFD is the VM heap's file (a memfd); Start passes a copy. The
	// proxy maps [HeapOff, HeapOff+HeapSize) of it shared, read/write.
	HeapFD            int
	HeapOff, HeapSize uint64
	// MaxFiles is the proxy's RLIMIT_NOFILE; default 256.
	MaxFiles int
	// MaxFileSize is the proxy's RLIMIT_FSIZE in bytes (EFBIG past it);
	// 0: unlimited. The VM's fastcalls, which sluiced runs, must obey the
	// same limit (syscalls.Spec.MaxFileSize): give both one setting.
	MaxFileSize uint64
	// NetNS names a network namespace (/run/netns/NAME) for the proxy's
	// sockets; default "": an isolated namespace of its own (loopback
	// down, no routes). Start joins it on a locked thread around the fork
	// (joining needs privileges over the namespace that only the parent
	// has).
	NetNS string
	// Cgroup is a cgroup v2 directory the proxy starts in (clone3
	// CLONE_INTO_CGROUP), so its CPU time is the VM's; default none.
	Cgroup string
	// UIDBase is the host uid and gid that is root in the sandbox: the
	// parent chooses (DefaultUIDBase); 0 is refused unless NoSandbox.
	UIDBase uint32
	// NoSandbox starts the proxy without namespaces or confinement, in
	// Volume: for tests of the serving logic only.
	NoSandbox bool
	// Spin and ContextSpin are the proxy's spins (ServeConfig): 0 leaves
	// the binary's defaults (DefaultServeConfig: DefaultSpin and
	// DefaultContextSpin with 4 processors or more, none below); negative
	// turns spinning off.
	Spin, ContextSpin time.Duration
	// Stderr receives the proxy's log; default discarded.
	Stderr io.Writer
	// Args are extra flags for the binary (test helpers).
	Args []string
}

// Validate checks cfg.
func (cfg StartConfig) Validate() error {
	switch {
	case cfg.Binary == "":
		return errors.New("proxy: no binary")
	case cfg.Volume == "":
		return errors.New("proxy: no volume")
	case cfg.HeapSize > 0 && cfg.HeapFD < 0:
		return errors.New("proxy: a heap size without a heap file")
	case !cfg.NoSandbox && cfg.UIDBase == 0:
		return errors.New("proxy: UIDBase 0 would map host root into the sandbox (use DefaultUIDBase)")
	case cfg.UIDBase > 1<<32-1-UIDRange:
		return fmt.Errorf("proxy: UIDBase %d leaves no room for %d ids", cfg.UIDBase, UIDRange)
	case cfg.Spin > time.Second || cfg.ContextSpin > time.Second:
		return fmt.Errorf("proxy: spins %v, %v: want at most 1s", cfg.Spin, cfg.ContextSpin)
	case cfg.MaxFiles < 0:
		return fmt.Errorf("proxy: max files %d", cfg.MaxFiles)
	}
	return nil
}

// Process is a running proxy.
type Process struct {
	Conn *net.UnixConn // the mediator's end; Ready (or Fatal) comes first
	Pid  int           // in the host's PID namespace
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts a VM's proxy (see StartConfig). It does not wait for Ready:
// the mediator reads it from Conn (AwaitReady).
func Start(cfg StartConfig) (*Process, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxFiles == 0 {
		cfg.MaxFiles = 256
	}
	if err := prepareVolume(cfg); err != nil {
		return nil, err
	}
	return launch(cfg)
}

// launch starts the binary for a validated cfg whose volume is prepared.
func launch(cfg StartConfig) (*Process, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("starting the proxy of %s: %w", cfg.VM, err)
	}
	child := os.NewFile(uintptr(fds[1]), "proxy-conn")
	defer child.Close()
	parent := os.NewFile(uintptr(fds[0]), "mediator-conn")
	defer parent.Close()
	files := []*os.File{child}
	if cfg.HeapFD >= 0 {
		dup, err := unix.FcntlInt(uintptr(cfg.HeapFD), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("passing the heap to the proxy of %s: %w", cfg.VM, err)
		}
		heap := os.NewFile(uintptr(dup), "heap")
		defer heap.Close()
		files = append(files, heap)
	}
	// Executed through a descriptor opened here: the sandbox's ids need no
	// search permission on the directories above the binary (a build in a
	// home directory of mode 0700, say).
	exe, err := os.Open(cfg.Binary)
	if err != nil {
		return nil, fmt.Errorf("starting the proxy of %s: %w", cfg.VM, err)
	}
	defer exe.Close()
	exeFD := 3 + len(files)
	files = append(files, exe)
	cmd := exec.Command(fmt.Sprintf("/proc/self/fd/%d", exeFD), append(cfg.args(), "--exe-fd", strconv.Itoa(exeFD))...)
	cmd.Args[0] = cfg.Binary
	cmd.ExtraFiles = files
	cmd.Stderr = cfg.Stderr
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if !cfg.NoSandbox {
		sandboxAttr(cmd.SysProcAttr, cfg)
	}
	if cfg.Cgroup != "" {
		cg, err := unix.Open(cfg.Cgroup, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("opening the cgroup of %s: %w", cfg.VM, err)
		}
		defer unix.Close(cg)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cg
	}
	if err := startIn(cmd, cfg.NetNS); err != nil {
		return nil, fmt.Errorf("starting the proxy of %s: %w", cfg.VM, err)
	}
	c, err := net.FileConn(parent)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("starting the proxy of %s: %w", cfg.VM, err)
	}
	p := &Process{Conn: c.(*net.UnixConn), Pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (cfg StartConfig) args() []string {
	a := []string{
		"--vm", cfg.VM,
		"--volume", cfg.Volume,
		"--heap-offset", strconv.FormatUint(cfg.HeapOff, 10),
		"--heap-size", strconv.FormatUint(cfg.HeapSize, 10),
		"--max-files", strconv.Itoa(cfg.MaxFiles),
	}
	if cfg.MaxFileSize > 0 {
		a = append(a, "--max-file-size", strconv.FormatUint(cfg.MaxFileSize, 10))
	}
	if cfg.NoSandbox {
		a = append(a, "--no-sandbox")
	}
	if cfg.Spin != 0 {
		a = append(a, "--spin", max(cfg.Spin, 0).String())
	}
	if cfg.ContextSpin != 0 {
		a = append(a, "--context-spin", max(cfg.ContextSpin, 0).String())
	}
	return append(a, cfg.Args...)
}

func sandboxAttr(a *syscall.SysProcAttr, cfg StartConfig) {
	a.Cloneflags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS
	if cfg.NetNS == "" {
		a.Cloneflags |= unix.CLONE_NEWNET
	}
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(cfg.UIDBase), Size: UIDRange}}
	a.UidMappings, a.GidMappings = m, m
	a.GidMappingsEnableSetgroups = true
	// Root of the namespace, with no supplementary groups: the parent's
	// would still count in permission checks, mapped or not.
	a.Credential = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
}

// prepareVolume creates the volume and gives it to the sandbox's root.
func prepareVolume(cfg StartConfig) error {
	if err := os.MkdirAll(cfg.Volume, 0o755); err != nil {
		return fmt.Errorf("creating the volume of %s: %w", cfg.VM, err)
	}
	// MkdirAll accepts a link to a directory, and Lchown would give the
	// link, not the directory, to the sandbox: refused here already, as the
	// sandbox refuses it (it opens the volume O_NOFOLLOW).
	if fi, err := os.Lstat(cfg.Volume); err != nil {
		return fmt.Errorf("checking the volume of %s: %w", cfg.VM, err)
	} else if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("the volume of %s, %s, is a symbolic link: give the directory itself", cfg.VM, cfg.Volume)
	}
	if cfg.NoSandbox {
		return nil
	}
	if err := os.Lchown(cfg.Volume, int(cfg.UIDBase), int(cfg.UIDBase)); err != nil {
		return fmt.Errorf("giving the volume of %s to its sandbox: %w", cfg.VM, err)
	}
	return nil
}

// startIn starts cmd, in network namespace netns when named: the fork
// happens on a thread that joined it, and the thread goes back after.
func startIn(cmd *exec.Cmd, netns string) error {
	if netns == "" {
		return cmd.Start()
	}
	target, err := unix.Open("/run/netns/"+netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening network namespace %q: %w", netns, err)
	}
	defer unix.Close(target)
	runtime.LockOSThread()
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening this thread's network namespace: %w", err)
	}
	defer unix.Close(own)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("joining network namespace %q: %w", netns, err)
	}
	serr := cmd.Start()
	if err := unix.Setns(own, unix.CLONE_NEWNET); err != nil {
		// The thread stays in netns: keep it locked so that it ends with
		// this goroutine instead of serving others.
		return errors.Join(serr, fmt.Errorf("leaving network namespace %q: %w", netns, err))
	}
	runtime.UnlockOSThread()
	return serr
}

// Wait waits for the proxy to end and returns how it ended.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Kill ends the proxy (SIGKILL) and closes Conn; Wait reaps it.
func (p *Process) Kill() error {
	_ = p.Conn.Close()
	err := p.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// Done is closed when the proxy has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times (100 on every
// Linux architecture Sluice runs on).
const clockTicks = 100

// CPUTime returns the proxy's CPU time so far (user + system, all its
// threads), from /proc/PID/stat.
func (p *Process) CPUTime() (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("reading the proxy's CPU time: %w", err)
	}
	// Fields after the command name (which may hold spaces): state is
	// field 3; utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("reading the proxy's CPU time: malformed stat %q", b)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("reading the proxy's CPU time: %d fields", len(f))
	}
	ut, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	st, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("reading the proxy's CPU time: %w", err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// AwaitReady reads the proxy's first message from conn: nil and the pid it
// reports for Ready of this protocol version; the proxy's reason for Fatal.
func AwaitReady(conn *net.UnixConn, timeout time.Duration) (int, error) {
	buf := make([]byte, 4096)
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	defer conn.SetReadDeadline(time.Time{})
	n, err := conn.Read(buf)
	if err != nil {
		return 0, fmt.Errorf("waiting for the proxy: %w", err)
	}
	msg := buf[:n]
	switch proxyproto.Type(msg) {
	case proxyproto.MsgFatal:
		return 0, fmt.Errorf("proxy failed: %s", proxyproto.DecodeFatal(msg))
	case proxyproto.MsgReady:
		v, pid, err := proxyproto.DecodeReady(msg)
		if err == nil && v != proxyproto.Version {
			err = fmt.Errorf("proxy speaks protocol %d, want %d", v, proxyproto.Version)
		}
		return pid, err
	}
	return 0, fmt.Errorf("%w: first message of type %d", proxyproto.ErrMessage, proxyproto.Type(msg))
}

// Handle is a running proxy as the mediator's forwarder holds it
// (syscalls.Proxy): its socket, pid and CPU time, and Close, which kills and
// reaps it.
type Handle struct{ p *Process }

// Handle returns p's Handle.
func (p *Process) Handle() Handle { return Handle{p} }

// Conn is the mediator's end of the proxy's socket.
func (h Handle) Conn() *net.UnixConn { return h.p.Conn }

// Pid is the proxy's host pid.
func (h Handle) Pid() int { return h.p.Pid }

// CPUTime is the proxy's CPU time so far; 0 once it is gone.
func (h Handle) CPUTime() time.Duration {
	t, _ := h.p.CPUTime()
	return t
}

// Close kills the proxy (closing its socket) and reaps it.
func (h Handle) Close() error {
	err := h.p.Kill()
	_ = h.p.Wait() // killed: its exit status says so
	return err
}
