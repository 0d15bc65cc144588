package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/internal/sdnotify"
	"github.com/sluice-gpu/sluice/mediator/internal/apiserver"
	"github.com/sluice-gpu/sluice/mediator/internal/daemon"
)

// handoverFlag is the hidden flag that gives a successor its manifest.
const handoverFlag = "--handover-fd"

// readManifest reads and checks the manifest in fd (a memfd the
// predecessor wrote), then closes fd.
func readManifest(fd int) (daemon.Manifest, error) {
	f := os.NewFile(uintptr(fd), "handover-manifest")
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return daemon.Manifest{}, fmt.Errorf("reading the hand-over manifest: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, 16<<20+1))
	if err != nil {
		return daemon.Manifest{}, fmt.Errorf("reading the hand-over manifest: %w", err)
	}
	return daemon.DecodeManifest(b, fd)
}

// upgradeCheck says why a SIGHUP cannot hand over (nothing has changed
// then) and otherwise returns the binary the successor runs: the one on
// disk now, so that an upgraded binary takes over.
func upgradeCheck(d *daemon.Daemon) (string, error) {
	if err := d.CanHandover(false); err != nil {
		return "", err
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding sluiced's binary: %w", err)
	}
	if err := unix.Access(exe, unix.X_OK); err != nil {
		return "", fmt.Errorf("the binary %s: %w", exe, err)
	}
	return exe, nil
}

// handOver quiesces the daemon and execs exe with the manifest; it
// returns only on failure, after which the daemon cannot go on.
func handOver(exe string, d *daemon.Daemon, srv *apiserver.Server, log *slog.Logger) error {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	apiFD, err := srv.Detach(sctx)
	if err != nil {
		return err
	}
	m, err := d.Handover(d.Config().HandoverWait)
	if err != nil {
		return err
	}
	m.HostAPI = apiFD
	b, err := m.Encode()
	if err != nil {
		return err
	}
	mfd, err := unix.MemfdCreate("sluiced-handover", 0) // no CLOEXEC: the successor reads it
	if err != nil {
		return fmt.Errorf("creating the hand-over manifest: %w", err)
	}
	if _, err := unix.Write(mfd, b); err != nil {
		return fmt.Errorf("writing the hand-over manifest: %w", err)
	}
	argv := append([]string{exe}, successorArgs(os.Args[1:])...)
	argv = append(argv, handoverFlag+"="+strconv.Itoa(mfd))
	log.Info("handing over to a successor", "binary", exe, "vms", len(m.VMs), "quiesced_in", time.Since(m.At))
	err = syscall.Exec(exe, argv, os.Environ())
	return fmt.Errorf("executing %s: %w", exe, err)
}

// successorArgs are the command line's arguments without a hand-over
// flag of the predecessor's.
func successorArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == handoverFlag:
			i++ // its value
		case strings.HasPrefix(a, handoverFlag+"="):
		default:
			out = append(out, a)
		}
	}
	return out
}

// fdStore makes cfg keep the VMs' descriptors in systemd's fd store when
// sluiced runs under a service manager that gave it a notification
// socket, and returns the descriptors the store passed back at this start
// (by name), taking the variables that passed them out of the environment
// its children see.
func fdStore(cfg *daemon.Config) (map[string][]int, error) {
	if n := sdnotify.FromEnv(os.Getenv); n.Enabled() {
		cfg.FDStore = n
	}
	stored, err := sdnotify.Listen(os.Getenv, os.Getpid())
	for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		os.Unsetenv(k)
	}
	return stored, err
}

// leaveToStore stops a daemon whose VMs' descriptors are in systemd's fd
// store without closing them (SIGTERM under systemd): the VMs quiesce and
// the usage settles as for a hand-over, and the guests stay connected to
// the store's copies. A restart (systemctl restart, or Restart= after a
// failure) passes them to the next sluiced, which takes the VMs over; a
// stop empties the store, which disconnects the guests.
func leaveToStore(d *daemon.Daemon, srv *apiserver.Server, log *slog.Logger) error {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("stopping host api", "err", err)
	}
	if err := d.CanHandover(true); err != nil {
		log.Warn("the vms cannot be left to the fd store: stopping them", "err", err)
		return d.Close()
	}
	m, err := d.Handover(d.Config().HandoverWait)
	if err != nil {
		return err
	}
	log.Info("stopped; the vms are left to systemd's fd store", "vms", len(m.VMs), "quiesced_in", time.Since(m.At))
	return nil
}
