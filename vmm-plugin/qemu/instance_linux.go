package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/vmm-plugin/qmp"
)

// ErrRunning and ErrNotRunning report a guest's state against what was asked.
var (
	ErrRunning    = errors.New("guest already running")
	ErrNotRunning = errors.New("guest not running")
)

// Instance is a running guest: its QEMU process and run directory.
type Instance struct {
	Config Config
	PID    int
	Accel  string // kvm or tcg ("" when found by Find)
}

// Start boots the guest: QEMU daemonizes once the machine is built, so an
// error in the configuration or a refused endpoint comes back from Start
// with QEMU's own message. The guest boots on after Start returns.
func Start(ctx context.Context, cfg Config) (*Instance, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if inst, err := Find(cfg.RunDir); err == nil {
		return nil, fmt.Errorf("starting %s: %w (pid %d)", cfg.Name, ErrRunning, inst.PID)
	}
	if err := os.MkdirAll(cfg.RunDir, 0o750); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cfg.Name, err)
	}
	// Leftovers of a guest that is gone: QEMU would refuse stale sockets.
	for _, p := range []string{cfg.QMPSocket(), cfg.ControlSocket(), cfg.PIDFile()} {
		os.Remove(p)
	}
	if cfg.Volume != "" {
		if err := PrepareVolume(cfg.Volume); err != nil {
			return nil, fmt.Errorf("starting %s: %w", cfg.Name, err)
		}
	}
	accel := HostAccel(cfg.Accel)
	args, err := cfg.Args(accel, true)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, cfg.Binary, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("starting %s: %s %s: %s", cfg.Name, cfg.Binary, accel, msg)
	}
	pid, err := readPID(cfg.PIDFile())
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", cfg.Name, err)
	}
	return &Instance{Config: cfg, PID: pid, Accel: accel}, nil
}

// Find returns the guest running from runDir, or an error wrapping
// ErrNotRunning.
func Find(runDir string) (*Instance, error) {
	cfg := Config{RunDir: runDir}
	pid, err := readPID(cfg.PIDFile())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotRunning, err)
	}
	if !alive(pid) {
		return nil, fmt.Errorf("%w (pid %d has exited)", ErrNotRunning, pid)
	}
	return &Instance{Config: cfg, PID: pid}, nil
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("pid file %s: bad pid %q", path, strings.TrimSpace(string(b)))
	}
	return pid, nil
}

// alive reports whether pid is a running process that is QEMU (a pid file
// can outlive its process, and the pid can be reused). A zombie (exited but
// not yet reaped by whoever adopted the daemon) counts as gone.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X' {
		return false
	}
	return strings.Contains(s[:i], "qemu")
}

// Wait returns when QEMU has exited, or with ctx's error.
func (in *Instance) Wait(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for alive(in.PID) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s (pid %d) to exit: %w", in.Config.Name, in.PID, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// Monitor connects to the guest's QMP socket. Close it when done.
func (in *Instance) Monitor(ctx context.Context) (*qmp.Monitor, error) {
	m, err := qmp.Dial(ctx, in.Config.QMPSocket())
	if err != nil {
		return nil, fmt.Errorf("connecting to the QMP monitor of %s: %w", in.Config.Name, err)
	}
	return m, nil
}

// Stop powers the guest down: the ACPI power button first (the guest's init
// stops its agent and powers off), QMP quit after grace, SIGKILL if QEMU
// still runs 5 s later. The run directory's sockets and pid file go; the
// console log stays.
func (in *Instance) Stop(ctx context.Context, grace time.Duration) (how string, err error) {
	defer in.cleanup()
	if m, err := in.Monitor(ctx); err == nil {
		defer m.Close()
		if err := m.SystemPowerdown(ctx); err == nil {
			wctx, cancel := context.WithTimeout(ctx, grace)
			err = in.Wait(wctx)
			cancel()
			if err == nil {
				return "powered off", nil
			}
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := m.Quit(qctx); err == nil {
			err = in.Wait(qctx)
			if err == nil {
				cancel()
				return "quit", nil
			}
		}
		cancel()
	}
	if err := unix.Kill(in.PID, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return "", fmt.Errorf("killing %s (pid %d): %w", in.Config.Name, in.PID, err)
	}
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := in.Wait(kctx); err != nil {
		return "", err
	}
	return "killed", nil
}

func (in *Instance) cleanup() {
	if alive(in.PID) {
		return
	}
	for _, p := range []string{in.Config.QMPSocket(), in.Config.ControlSocket(), in.Config.PIDFile()} {
		os.Remove(p)
	}
}

// AttachEndpoint hot-plugs the Sluice device into the running guest: a
// socket chardev to the endpoint, then an ivshmem-doorbell device on it.
// The endpoint's server must be listening (QEMU connects once). The guest
// sees a new PCI device (ACPI PCI hot-plug on the pc machine).
func (in *Instance) AttachEndpoint(ctx context.Context, endpoint string, vectors int) error {
	if strings.Contains(endpoint, ",") || vectors < 1 {
		return fmt.Errorf("%w: endpoint %q with %d vectors", ErrInvalid, endpoint, vectors)
	}
	m, err := in.Monitor(ctx)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.ChardevAddSocket(ctx, ChardevID, endpoint); err != nil {
		return fmt.Errorf("hot-plugging the endpoint into %s: %w", in.Config.Name, err)
	}
	err = m.DeviceAdd(ctx, "ivshmem-doorbell", DeviceID, map[string]any{"chardev": ChardevID, "vectors": vectors})
	if err != nil {
		m.ChardevRemove(ctx, ChardevID)
		return fmt.Errorf("hot-plugging the endpoint into %s: %w", in.Config.Name, err)
	}
	return nil
}
