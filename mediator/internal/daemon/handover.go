package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/vm"
	"golang.org/x/sys/unix"
)

// CanHandover reports why the daemon cannot hand its VMs over to a
// successor, nil if it can; toStore asks about leaving them to the fd
// store (Config.FDStore) for a successor started by the service manager.
// Nothing has changed when it says no.
func (d *Daemon) CanHandover(toStore bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, e := range d.sortedLocked() {
		errs = append(errs, e.vm.CanExport(toStore))
	}
	return errors.Join(errs...)
}

// Handover quiesces every VM (vm.Export: wait bounds the wait for the
// commands in flight; what is still in flight then runs again in the
// successor), settles and flushes the usage ledger on the final counts, as
// a clean stop does, and describes what a successor adopts (Adopt): the
// VMs' descriptors, the epoch and the state dir's lock, all kept across
// exec. The daemon is done with afterwards: the caller execs the successor
// or, failing that, exits (the guests then see their mediator go, as on a
// crash).
func (d *Daemon) Handover(wait time.Duration) (Manifest, error) {
	if d.journal != nil {
		d.journal.close() // its loop takes d.mu; the last commit is here
	}
	d.mu.Lock() // for good: no host API call changes a VM any more
	m := Manifest{Version: ManifestVersion, At: time.Now(), Epoch: d.epoch, NextID: d.nextID, Handovers: d.handovers + 1}
	es := d.sortedLocked()
	handed := make([]vm.Handover, len(es))
	errs := make([]error, len(es))
	var wg sync.WaitGroup
	for i, e := range es { // in parallel: each waits for its own commands
		wg.Add(1)
		go func() {
			defer wg.Done()
			handed[i], errs[i] = e.vm.Export(wait)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Manifest{}, fmt.Errorf("handing the vms over: %w", err)
	}
	for i, e := range es {
		m.VMs = append(m.VMs, VMHandover{Name: e.req.Name, ID: e.vm.Config().ID, VM: handed[i]})
	}
	if d.stop != nil {
		d.stop()
		<-d.done
		d.stop = nil
	}
	var err error
	if d.journal != nil {
		err = d.journal.finish(es) // the ledger settled and flushed, the journal empty
	} else {
		err = d.persist(es)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("persisting usage for the hand-over: %w", err)
	}
	// A dup, inheritable: the flock is the open file's, which both share,
	// and the lock's *os.File keeps its own descriptor (closing it, or its
	// finalizer, leaves the successor's alone).
	if m.Lock, err = unix.FcntlInt(d.lock.f.Fd(), unix.F_DUPFD, 3); err != nil {
		return Manifest{}, fmt.Errorf("passing the state dir's lock on: %w", err)
	}
	return m, nil
}

// Adopt is New for a successor process: it takes over what the daemon
// that exec'd it handed over in m (Handover) instead of starting afresh:
// the state dir's lock, the epoch, and each VM's region, doorbell server
// and guests, which go on where they paused. A VM of vms.json that m
// lacks is created anew; a VM of m that vms.json lacks is closed. A VM
// that cannot be adopted fails the start (the process exits and the
// guests see a disconnect, as after a crash).
func Adopt(cfg Config, m Manifest) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var lock *stateLock
	var err error
	if m.Lock == 0 { // after a crash (AdoptStore): the kernel dropped the lock
		lock, err = lockStateDir(cfg.StateDir)
	} else {
		lock, err = adoptLock(cfg.StateDir, m.Lock)
	}
	if err != nil {
		return nil, err
	}
	d, err := open(cfg, lock, &m)
	if err != nil {
		return nil, errors.Join(err, lock.release())
	}
	slog.Info("vms adopted from the hand-over", "vms", len(m.VMs), "pause", time.Since(m.At))
	return d, nil
}

// adoptLock takes over the state dir's lock from fd, which must be the
// lock file, still locked by this process (the predecessor's flock goes
// with the open file across exec).
func adoptLock(dir string, fd int) (*stateLock, error) {
	path := filepath.Join(dir, LockFile)
	var fst, pst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		return nil, fmt.Errorf("%w: the lock fd %d: %w", ErrBadManifest, fd, err)
	}
	if err := unix.Stat(path, &pst); err != nil || fst.Dev != pst.Dev || fst.Ino != pst.Ino {
		return nil, fmt.Errorf("%w: fd %d is not %s (%v)", ErrBadManifest, fd, path, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("the handed-over lock of %s: %w: %w", dir, ErrStateDirLocked, err)
	}
	unix.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), path)
	if err := writePid(f, path); err != nil {
		f.Close()
		return nil, err
	}
	return &stateLock{f: f}, nil
}

// adoptions indexes m's VMs by name (none without m).
func adoptions(m *Manifest) map[string]*VMHandover {
	out := map[string]*VMHandover{}
	if m != nil {
		for i := range m.VMs {
			out[m.VMs[i].Name] = &m.VMs[i]
		}
	}
	return out
}

// AdoptStore is New after a crash under a service manager that kept the
// VMs' descriptors (Config.FDStore; stored, by name, as passed back at
// start): each VM of the state dir's list whose descriptors are there is
// taken over with its guests, its channels resuming where the crashed
// daemon published them; the usage is the journal's, as after any crash.
// The epoch is new. Descriptors stored that nothing takes are closed.
func AdoptStore(cfg Config, stored map[string][]int) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := Manifest{Version: ManifestVersion, At: time.Now()}
	saved, err := (&Daemon{cfg: cfg}).loadVMs()
	if err != nil {
		return nil, err
	}
	for _, req := range saved.VMs {
		req := (&Daemon{cfg: cfg}).withDefaults(req)
		if cfg.Proxy.Binary != "off" && cfg.Layout.SyscallSlots > 0 && !vm.StoredHead(req.Name, stored) {
			// Where its syscall forwarder read the request ring to is not
			// stored: reading it again from 0 would run calls twice.
			slog.Warn("fd store: a vm serving system calls without its ring head stored is not taken over; its guests reconnect", "vm", req.Name)
			continue
		}
		h, err := vm.FromStore(req.Name, abi.Vectors(req.Channels), stored)
		if err != nil {
			slog.Warn("fd store: a vm is not taken over; its guests reconnect", "vm", req.Name, "err", err)
			continue
		}
		m.VMs = append(m.VMs, VMHandover{Name: req.Name, VM: h})
	}
	for name, fds := range stored {
		// Out of the store too: a listening socket it kept would keep the
		// VM's endpoint from being created anew.
		slog.Warn("fd store: descriptors nothing takes over are closed", "name", name, "fds", len(fds))
		closeFDs(fds)
		if cfg.FDStore != nil {
			if err := cfg.FDStore.Remove(name); err != nil {
				slog.Warn("fd store: descriptors nothing takes over stay stored", "name", name, "err", err)
			}
		}
	}
	if len(m.VMs) == 0 {
		return New(cfg)
	}
	d, err := Adopt(cfg, m)
	if err == nil {
		slog.Info("vms taken over from the fd store after a crash", "vms", len(m.VMs))
	}
	return d, err
}
