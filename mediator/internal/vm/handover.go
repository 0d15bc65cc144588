package vm

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/internal/channel"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
	"golang.org/x/sys/unix"
)

// Handover is a VM endpoint's state for a successor process (sluiced
// re-executing itself): the region's memfd, the doorbell server's
// descriptors and peers, and each channel's position. Config.Adopt gives
// it to New in the successor.
type Handover struct {
	Memfd    int                `json:"memfd"`
	Created  time.Time          `json:"created"`
	Server   ivshmem.Handover   `json:"server"`
	Channels []channel.Position `json:"channels"`
	// SyscallHead is the request ring's position the syscall forwarder
	// had read to (syscalls.Forwarder.RingHead), for the successor's.
	SyscallHead uint64 `json:"syscall_head,omitempty"`
	// Device is the VM's device state the backend kept (backend.Keeper):
	// its buffers, modules and handles; nil where it kept none.
	Device *backend.Kept `json:"device,omitempty"`
	// DeviceStored says Device is in the fd store under the VM's names
	// (FromStore's, or stored when it was kept): a successor that goes on
	// in those very files (a backend.Persister) leaves them stored.
	DeviceStored bool `json:"device_stored,omitempty"`
	// SysRing is the memfd the syscall forwarder stores its request
	// ring's head in (0: none; a VM with an fd store has one).
	SysRing int `json:"sys_ring,omitempty"`
	// Orphans says the predecessor crashed: calls its forwarder took may
	// be unanswered (syscalls.Orphans). Set by FromStore.
	Orphans bool `json:"-"`
}

// FDs lists every descriptor h names.
func (h Handover) FDs() []int {
	fds := append([]int{h.Memfd}, h.Server.FDs()...)
	if h.Device != nil {
		fds = append(fds, h.Device.FDs...)
	}
	if h.SysRing != 0 {
		fds = append(fds, h.SysRing)
	}
	return fds
}

// ErrNoHandover is returned by Export for a VM that cannot be handed over.
var ErrNoHandover = errors.New("the vm cannot be handed over")

// CanExport reports why the VM cannot be handed over, nil if it can;
// toStore asks about leaving it to an fd store for a successor that
// finds it there (FromStore), which a VM serving system calls can be only
// with the file its forwarder stores the ring's head in (Config.Store).
func (v *VM) CanExport(toStore bool) error {
	if toStore && v.sys != nil && v.sysRing.fd < 0 {
		return fmt.Errorf("vm %q serves system calls and stores no request ring head: %w", v.cfg.Name, ErrNoHandover)
	}
	return nil
}

// drainPoll is how often Export looks whether the records in flight have
// completed.
const drainPoll = 200 * time.Microsecond

// Export quiesces the VM and describes it for a successor: its channels
// stop forwarding, the records in flight get up to wait to complete, the
// channels freeze (a record still in flight runs again in the successor,
// channel.Freeze), the syscall proxy ends (the calls it held fail with
// EIO) and the doorbell server detaches (ivshmem.Server.Export).
// The counters are final once Export returns. The VM is done with: the
// descriptors are the handover's, and the process execs next (Close would
// still stop the backend's work and unmap the region).
func (v *VM) Export(wait time.Duration) (Handover, error) {
	for _, c := range v.channels {
		c.Close()
	}
	deadline := time.Now().Add(wait)
	for !v.idle() && time.Now().Before(deadline) {
		time.Sleep(drainPoll)
	}
	h := Handover{Memfd: v.memfd, Created: v.created, Channels: make([]channel.Position, len(v.channels))}
	for i, c := range v.channels {
		h.Channels[i] = c.Freeze()
	}
	if v.sys != nil {
		// The proxy ends and the calls it held fail with EIO (as when a
		// proxy is restarted); the calls not read yet wait in the ring
		// for the successor's forwarder, which reads on from the head.
		if err := v.sys.Close(); err != nil {
			slog.Warn("hand-over: stopping the syscall proxy", "vm", v.cfg.Name, "err", err)
		}
		h.SyscallHead = v.sys.RingHead()
	}
	h.Device, h.DeviceStored = v.keepDevice()
	if v.sysRing.fd >= 0 {
		if err := ivshmem.Inheritable(v.sysRing.fd); err != nil {
			return Handover{}, fmt.Errorf("exporting vm %q: %w", v.cfg.Name, err)
		}
		h.SysRing, v.sysRing.fd = v.sysRing.fd, -1 // the hand-over's now
	}
	v.mu.Lock()
	srv := v.server
	v.server = nil
	v.mu.Unlock()
	if srv == nil {
		return Handover{}, fmt.Errorf("exporting vm %q: %w", v.cfg.Name, ivshmem.ErrClosed)
	}
	var err error
	if h.Server, err = srv.Export(); err != nil {
		return Handover{}, fmt.Errorf("exporting vm %q: %w", v.cfg.Name, err)
	}
	if err := ivshmem.Inheritable(v.memfd); err != nil {
		return Handover{}, fmt.Errorf("exporting vm %q: %w", v.cfg.Name, err)
	}
	v.memfd = -1 // the hand-over's now
	return h, nil
}

// keepDevice has the backend keep the VM's device state for the
// successor (backend.Keeper), and puts it in the fd store when the VM has
// one (a successor started after a crash finds it there; stored says it
// is); nil where the backend keeps none or could not: the successor then
// starts the VM's device state afresh.
func (v *VM) keepDevice() (_ *backend.Kept, stored bool) {
	k, ok := v.gpu.(backend.Keeper)
	if !ok {
		return nil, false
	}
	kept, err := k.Keep()
	v.gpu = nil // closed: Close has nothing of it left to close
	if err == nil {
		for _, fd := range kept.FDs {
			if err = ivshmem.Inheritable(fd); err != nil {
				break
			}
		}
	}
	if err != nil {
		slog.Warn("hand-over: the vm's device state is not kept; its buffers and modules are lost", "vm", v.cfg.Name, "err", err)
		return nil, false
	}
	if v.cfg.Store != nil && len(kept.Data) == 0 {
		if err := v.storeDevice(kept); err != nil {
			slog.Warn("fd store: the vm's kept device state is not stored; a crash now would lose its buffers", "vm", v.cfg.Name, "err", err)
		} else {
			stored = true
		}
	}
	return &kept, stored
}

// adoptDevice attaches the VM to the backend with the device state the
// predecessor kept, or, where the backend refuses it
// (backend.ErrBadKept), afresh. The kept descriptors are closed once
// Attach returns, either way. They stay in the fd store while the
// backend adopts them, so that a crash meanwhile leaves them there for
// the next successor: a backend.Persister goes on in those very files
// (they stay stored, and New's storeDevice finds them stored already); a
// backend that stores its live state itself (the cuda backend's worker,
// StoreKept) stores it in their place as it attaches. Only a state
// refused, or one that neither kind goes on in, is taken out. stored says
// kept is in the store (Handover.DeviceStored).
func (v *VM) adoptDevice(be backend.Backend, spec backend.VMSpec, kept *backend.Kept, stored bool) (backend.VM, error) {
	defer func() {
		for _, fd := range kept.FDs {
			unix.Close(fd)
		}
	}()
	unstore := func() {
		if v.cfg.Store == nil {
			return
		}
		if err := v.unstoreDevice(*kept); err != nil {
			slog.Warn("fd store: a kept device state the vm does not go on in stays stored", "vm", v.cfg.Name, "err", err)
		}
	}
	spec.Adopt = kept
	gpu, err := be.Attach(spec)
	if errors.Is(err, backend.ErrBadKept) {
		slog.Warn("the device state kept for the vm is refused; its buffers and modules are lost", "vm", v.cfg.Name, "err", err)
		unstore()
		spec.Adopt = nil
		return be.Attach(spec)
	}
	if err != nil {
		return nil, err
	}
	slog.Info("vm device state adopted", "vm", v.cfg.Name, "backend", kept.Backend)
	if _, live := gpu.(backend.Persister); live && stored && v.cfg.Store != nil {
		v.adoptedDevice(*kept)
	} else if !live && !v.storedBy(kept.Backend) {
		unstore()
	}
	return gpu, nil
}

// idle reports whether no channel has a record in flight.
func (v *VM) idle() bool {
	for _, c := range v.channels {
		if c.Snapshot().InFlight != 0 {
			return false
		}
	}
	return true
}

// memfdSeals are the seals New's memfd has (shm.NewMemfd).
const memfdSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// adoptMemfd checks that fd is a memfd of size bytes sealed as New seals
// its own, so that mapping it cannot fault, and keeps it from the
// processes sluiced starts.
func adoptMemfd(fd int, size uint64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("adopted memfd %d: %w", fd, err)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&memfdSeals != memfdSeals || st.Size < 0 || uint64(st.Size) != size {
		return fmt.Errorf("adopted fd %d: want a sealed memfd of %d bytes (size %d, seals %#x, %v): %w",
			fd, size, st.Size, seals, err, ivshmem.ErrBadHandover)
	}
	unix.CloseOnExec(fd)
	return nil
}

// catchUp forwards what the guests wrote while no one served them (their
// doorbells then went to the predecessor, or wait unread).
func (v *VM) catchUp() {
	for _, c := range v.channels {
		c.Found()
	}
}
