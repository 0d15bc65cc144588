// Package vm is one VM's endpoint in the mediator: its shared-memory region
// (a sealed memfd), its ivshmem doorbell server, its channels and its context
// on the backend. Doorbells arrive on the server's epoll goroutine and are
// handled there, so a VM that storms doorbells spends only its own goroutine.
package vm

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/internal/channel"
	"github.com/sluice-gpu/sluice/mediator/internal/spin"
	"github.com/sluice-gpu/sluice/mediator/internal/syscalls"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
	"golang.org/x/sys/unix"
)

// Config describes a VM endpoint.
type Config struct {
	Name       string
	ID         uint32
	Weight     uint32
	Layout     abi.Layout
	Limits     abi.Limits
	Socket     string      // ivshmem server socket path
	SocketMode os.FileMode // 0 means 0660
	Epoch      uint64      // the mediator's epoch, published in the header
	MaxPeers   int         // guest peers allowed on the socket (0: the server's default)
	// Owners may open the endpoint besides root and the daemon's own user
	// (the uid of the VM's QEMU); HandshakeTimeout is how long a new peer
	// has to read its handshake (0: the server's default). Refusals counts
	// the others.
	Owners           []ivshmem.Owner
	HandshakeTimeout time.Duration
	// StartProxy starts the VM's syscall proxy; nil, or a layout without
	// syscall slots, leaves the syscall area unserved (FeatureSyscalls off).
	StartProxy ProxyStarter
	Syscalls   syscalls.Config // the forwarder's tuning
	// GPUBaseNs is the VM's GPU time before this endpoint (from the usage
	// ledger), which getrusage adds to the endpoint's own.
	GPUBaseNs uint64
	// MemoryQuota bounds the device memory the VM may hold (buffers; on a GPU modules and local memory too), in
	// bytes; 0 is none but the device's (backend.VMSpec.MemoryQuota).
	MemoryQuota uint64
	// MaxFileSize is the VM's file size limit for its fastcall writes
	// (syscalls.Spec.MaxFileSize); StartProxy must give its proxy the same
	// (proxy.StartConfig.MaxFileSize). 0: none.
	MaxFileSize uint64
	// Spin is how the doorbell goroutine busy-polls the VM's rings after a
	// doorbell or a completion (spin.Config.Window: the longest window,
	// 0 never), charged to SpinBudget, shared by the daemon's VMs (nil:
	// never spins).
	SpinWindow time.Duration
	SpinBudget *spin.Budget
	// DoorbellLimit is the most doorbells a second read from the VM's
	// guests before the vector rung is muted (ivshmem.ServerConfig); 0:
	// none.
	DoorbellLimit int
	// Adopt, set in a successor process, is the endpoint the predecessor
	// handed over (Export): New takes its region, channel positions and
	// doorbell server over instead of making new ones. Without channel
	// positions (a hand-over rebuilt from an fd store after a crash,
	// FromStore) they are read from the region.
	Adopt *Handover
	// Store, optional, keeps the VM's descriptors outside the process for
	// a successor after a crash (FDStore).
	Store FDStore
}

// ErrNoQuota is returned for a memory quota on a backend that cannot
// enforce one (its VMs do not implement backend.MemoryQuota).
var ErrNoQuota = errors.New("the backend enforces no device memory quota")

// ErrBadLimit is returned for a longest command that is not positive.
var ErrBadLimit = errors.New("the longest command must be positive")

// ProxyStarter starts a VM's syscall proxy, which maps the heap from the
// VM's memfd (heapOff, heapSize).
type ProxyStarter func(memfd int, heapOff int64, heapSize uint64) (syscalls.Proxy, error)

// VM is a live endpoint.
type VM struct {
	cfg      Config
	created  time.Time
	memfd    int
	mem      []byte
	region   *shm.Region
	server   *ivshmem.Server
	waker    waker // the channels' Waker: server, once it exists
	gpu      backend.VM
	channels []*channel.Channel
	sys      *syscalls.Forwarder                // nil without a syscall area
	sysRing  sysRing                            // where sys stores its ring head, for a successor after a crash
	sysRef   atomic.Pointer[syscalls.Forwarder] // sys, for the backend's goroutines (VMSpec.RingHead)
	gpuMem   backend.MemoryQuota                // gpu's quota, nil where the backend has none
	gpuLim   backend.CommandLimit               // gpu's longest command, nil where the backend has none

	quotaMu sync.Mutex    // orders SetMemoryQuota calls
	quota   atomic.Uint64 // the memory quota in effect (Config has the first)

	limitMu  sync.Mutex    // orders SetMaxCommand calls
	maxCmd   atomic.Int64  // the longest command in effect, ns (Config.Limits has the first)
	lastBeat atomic.Uint64 // the last Heartbeat, for a header written again

	mu sync.Mutex // guards server and mem against Close

	doorbells atomic.Uint64 // every doorbell, on any vector
	other     atomic.Uint64 // doorbells on the syscall and control vectors
	refusals  refusals      // endpoint.go

	bell bellState // the doorbell goroutine's (doorbell.go)

	devMu     sync.Mutex              // orders the backend's StoreKept and RemoveKept
	devStored map[string]storedDevice // the device state stored, by backend (fdstore.go)
}

// New creates the region, attaches the VM to the backend and starts
// listening for the guest. On error nothing is left behind.
func New(cfg Config, be backend.Backend) (_ *VM, err error) {
	v := &VM{cfg: cfg, created: time.Now(), memfd: -1, sysRing: sysRing{fd: -1}}
	defer func() {
		if err == nil {
			return
		}
		if cfg.Store != nil && cfg.Adopt == nil {
			// A VM created afresh leaves nothing stored (the device files
			// it stored once attached); an adopted one's state stays
			// stored as its predecessor left it, for another try.
			if uerr := v.unstoreDevices(); uerr != nil {
				slog.Warn("fd store: a vm that failed to start stays stored", "vm", cfg.Name, "err", uerr)
			}
		}
		v.release()
	}()
	l := cfg.Layout
	if a := cfg.Adopt; a != nil {
		if err := adoptMemfd(a.Memfd, l.RegionSize); err != nil {
			return nil, err
		}
		if a.Channels != nil && len(a.Channels) != int(l.Channels) {
			return nil, fmt.Errorf("%d channel positions for %d channels: %w", len(a.Channels), l.Channels, ivshmem.ErrBadHandover)
		}
		v.memfd, v.created = a.Memfd, a.Created
	} else if v.memfd, err = shm.NewMemfd("sluice-"+cfg.Name, int64(l.RegionSize)); err != nil {
		return nil, err
	}
	if v.mem, err = shm.Map(v.memfd, int(l.RegionSize)); err != nil {
		return nil, err
	}
	v.region = shm.New(v.mem)
	var positions []channel.Position
	if a := cfg.Adopt; a != nil {
		if positions = a.Channels; positions == nil {
			positions = v.positions() // before the header is written again
		}
	}
	v.writeHeader(0)
	spec := backend.VMSpec{
		ID:       cfg.ID,
		Name:     cfg.Name,
		Channels: int(l.Channels),
		Heap:     v.region.Bytes(l.HeapOff, l.HeapSize),
		// The heap's memfd, for a backend that maps it into another
		// process (the cuda backend's per-VM GPU worker).
		HeapFile:    &backend.FileRange{FD: v.memfd, Offset: int64(l.HeapOff)},
		MaxInFlight: int(l.RingEntries),
		MemoryQuota: cfg.MemoryQuota,
		// The longest THROTTLE is the longest command of any kind.
		MaxCommandNs: int64(min(cfg.Limits.MaxThrottleNs, math.MaxInt64)),
		Complete:     v.complete,
	}
	if cfg.Store != nil {
		spec.Store = deviceStore{v}
	}
	if v.serveSyscalls() {
		// Where a claim counter the backend makes again starts (ringhead.go).
		spec.RingHead = newRingHead(v, shm.New(v.region.Bytes(l.SyscallOff, l.SyscallSize))).get
		spec.Syscalls = v.region.Bytes(l.SyscallOff, l.SyscallSize)
		spec.SyscallFile = &backend.FileRange{FD: v.memfd, Offset: int64(l.SyscallOff)}
	}
	if a := cfg.Adopt; a != nil && a.Device != nil {
		v.gpu, err = v.adoptDevice(be, spec, a.Device, a.DeviceStored)
	} else {
		v.gpu, err = be.Attach(spec)
	}
	if err != nil {
		return nil, fmt.Errorf("attaching vm %q to the backend: %w", cfg.Name, err)
	}
	if p, ok := v.gpu.(backend.Persister); ok && cfg.Store != nil {
		// The files the backend keeps the device state in from now on
		// (the sim's): a successor after a crash attaches the VM with them.
		if k := p.Stored(); len(k.FDs) > 0 {
			if err := v.storeDevice(k); err != nil {
				slog.Warn("fd store: the vm's device state is not stored; a crash now would lose its buffers", "vm", cfg.Name, "err", err)
			}
		}
	}
	v.gpuMem, _ = v.gpu.(backend.MemoryQuota)
	v.gpuLim, _ = v.gpu.(backend.CommandLimit)
	v.maxCmd.Store(int64(min(cfg.Limits.MaxThrottleNs, math.MaxInt64)))
	if v.gpuMem == nil && cfg.MemoryQuota != 0 {
		return nil, fmt.Errorf("vm %q: memory quota: %w", cfg.Name, ErrNoQuota)
	}
	v.quota.Store(cfg.MemoryQuota)
	v.channels = make([]*channel.Channel, l.Channels)
	budget := channel.NewBudget(0) // unbounded until the scheduler's gate sizes it
	for i := range v.channels {
		if cfg.Adopt != nil {
			v.channels[i] = channel.Resumed(i, v.region, l, cfg.Limits, submitter{v.gpu}, positions[i])
		} else {
			v.channels[i] = channel.New(i, v.region, l, cfg.Limits, submitter{v.gpu})
		}
		v.channels[i].SetBudget(budget)
		v.channels[i].SetWaker(&v.waker)
		v.channels[i].SetLog(slog.Default().With("vm", cfg.Name))
	}
	if v.serveSyscalls() {
		if err = v.openSysRing(); err != nil {
			return nil, fmt.Errorf("vm %q: %w", cfg.Name, err)
		}
		if err = v.startSyscalls(); err != nil {
			return nil, err
		}
	}
	v.initBell()
	if v.server, err = v.newServer(); err != nil {
		return nil, fmt.Errorf("starting the doorbell server of vm %q: %w", cfg.Name, err)
	}
	v.waker.srv.Store(v.server)
	if cfg.Store != nil {
		v.storeAll()
	}
	if cfg.Adopt != nil {
		v.catchUp()
	}
	return v, nil
}

// newServer starts the VM's doorbell server, or adopts the one handed
// over.
func (v *VM) newServer() (*ivshmem.Server, error) {
	cfg := v.cfg
	sc := ivshmem.ServerConfig{
		SocketPath: cfg.Socket,
		SocketMode: cfg.SocketMode,
		ShmFD:      v.memfd,
		Vectors:    abi.Vectors(int(cfg.Layout.Channels)),
		MaxPeers:   cfg.MaxPeers,
		OnDoorbell: v.doorbell,
		// Only the VM's owner may connect, and must read its handshake
		// in time (endpoint.go).
		Owners:           cfg.Owners,
		HandshakeTimeout: cfg.HandshakeTimeout,
		OnRefuse:         v.refused,
		// The storm limit and the busy-poll window (doorbell.go).
		DoorbellLimit: cfg.DoorbellLimit,
		OnLimit:       v.limited,
		OnIdle:        v.idleHook(),
		// A guest joining reads a header the host wrote just now: one
		// corrupted since (by a guest of the VM) does not keep the next
		// from joining.
		OnAdmit: v.rewriteHeader,
		OnPeer: func(id uint16, connected bool) {
			if connected {
				slog.Info("guest joined", "vm", cfg.Name, "peer", id)
			} else {
				slog.Info("guest left", "vm", cfg.Name, "peer", id)
				if cfg.Store != nil {
					v.unstorePeer(id)
				}
			}
		},
	}
	if cfg.Store != nil {
		sc.OnJoinFDs = v.storePeer
	}
	if cfg.Adopt != nil {
		return ivshmem.AdoptServer(sc, cfg.Adopt.Server)
	}
	return ivshmem.NewServer(sc)
}

// waker signals guest peers for the channels (abi.FeatureWake) through the
// VM's ivshmem server: nothing before the server exists (no guest has
// joined), and after its Close, Notify fails with ivshmem.ErrClosed, which
// the channels ignore.
type waker struct {
	srv atomic.Pointer[ivshmem.Server]
}

func (w *waker) Notify(peer uint16, vector int) error {
	if s := w.srv.Load(); s != nil {
		return s.Notify(peer, vector)
	}
	return nil
}

func (v *VM) serveSyscalls() bool {
	return v.cfg.StartProxy != nil && v.cfg.Layout.SyscallSlots > 0
}

// startSyscalls starts the forwarder, which starts (and keeps) the proxy.
func (v *VM) startSyscalls() error {
	l := v.cfg.Layout
	start := v.cfg.StartProxy
	head := v.adoptedHead()
	answered := v.answerOrphans(head)
	var headStore *uint64
	if v.sysRing.mem != nil {
		headStore = v.sysRing.head()
	}
	sys, err := syscalls.New(syscalls.Spec{
		Name:  v.cfg.Name,
		Area:  shm.New(v.region.Bytes(l.SyscallOff, l.SyscallSize)),
		Slots: int(l.SyscallSlots),
		Heap:  v.region.Bytes(l.HeapOff, l.HeapSize),
		Memfd: &syscalls.Memfd{FD: v.memfd, Off: l.SyscallOff},
		Start: func() (syscalls.Proxy, error) {
			return start(v.memfd, int64(l.HeapOff), l.HeapSize)
		},
		GPUNs:       func() uint64 { return v.cfg.GPUBaseNs + v.Stats().Total.BusyNs },
		MaxFileSize: v.cfg.MaxFileSize,
		RingHead:    head,
		HeadStore:   headStore,
		Answered:    answered,
	}, v.cfg.Syscalls)
	if err != nil {
		return fmt.Errorf("serving the syscalls of vm %q: %w", v.cfg.Name, err)
	}
	v.sys = sys
	v.sysRef.Store(sys)
	return nil
}

// adoptedHead is where the predecessor's syscall forwarder read the
// request ring to (0 without one).
func (v *VM) adoptedHead() uint64 {
	if v.cfg.Adopt != nil {
		return v.cfg.Adopt.SyscallHead
	}
	return 0
}

// rewriteHeader writes the header again, with the limits in force and
// the last heartbeat, and the channels' host lines (which the host
// otherwise writes only where they change).
func (v *VM) rewriteHeader() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.mem != nil {
		v.writeHeader(v.lastBeat.Load())
		for _, c := range v.channels {
			c.Republish()
		}
	}
}

func (v *VM) writeHeader(heartbeat uint64) {
	lim := v.cfg.Limits
	if ns := v.maxCmd.Load(); ns > 0 { // SetMaxCommand's, once the VM runs
		lim.MaxThrottleNs = uint64(ns)
	}
	var b [abi.HeaderSize]byte
	// Every channel honours its wake word: a process guest sleeps on its
	// eventfd instead of polling (a guest that polls is never signalled).
	features := abi.FeatureWake
	if v.cfg.SpinWindow > 0 && v.cfg.SpinBudget != nil {
		// The doorbell goroutine sets HdrPolling while it spins
		// (doorbell.go); written 0 here, as a spin in progress that sees
		// it so only gets doorbells it did not need.
		features |= abi.FeaturePolling
	}
	if v.serveSyscalls() {
		features |= abi.FeatureSyscalls | abi.FeatureReadyMap | abi.FeatureResultWord | abi.FeatureSyscallRing
	}
	abi.EncodeHeader(b[:], abi.Header{
		VersionMajor: abi.VersionMajor,
		VersionMinor: abi.VersionMinor,
		Features:     features,
		HostPeerID:   0,
		Layout:       v.cfg.Layout,
		Epoch:        v.cfg.Epoch,
		Heartbeat:    heartbeat,
		Limits:       lim,
	})
	v.region.CopyIn(0, b[:])
}

// complete runs on a backend goroutine.
func (v *VM) complete(c backend.Completion) {
	if c.Channel < 0 || c.Channel >= len(v.channels) {
		return
	}
	v.noteCompletion()
	v.channels[c.Channel].Complete(channel.Completion{
		Index:  uint32(c.Tag),
		Op:     c.Op,
		Code:   c.Code,
		BusyNs: c.Busy(),
	})
}

// Heartbeat publishes the mediator's liveness (nanoseconds) in the header;
// after Close it does nothing.
func (v *VM) Heartbeat(ns uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.mem != nil {
		v.region.Store64(abi.HdrHeartbeat, ns)
		v.lastBeat.Store(ns)
	}
}

// submitter maps the backend's refusals to channel error codes.
type submitter struct{ gpu backend.VM }

func (s submitter) Submit(ch int, cmd abi.Command, tag uint64) error {
	err := s.gpu.Submit(ch, cmd, tag)
	if errors.Is(err, backend.ErrClosed) {
		return fmt.Errorf("%w: %w", abi.ErrShutdown, err)
	}
	return err
}

// Channels are the VM's channels, for the scheduler's gate.
func (v *VM) Channels() []*channel.Channel { return v.channels }

// Config returns the VM's configuration.
func (v *VM) Config() Config { return v.cfg }

// Created is when the endpoint was created.
func (v *VM) Created() time.Time { return v.created }

// Peers lists the connected guest peers.
func (v *VM) Peers() []uint16 {
	v.mu.Lock()
	srv := v.server
	v.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Peers()
}

// SetMemoryQuota changes the VM's device memory quota (0: none but the
// device's) for the allocations that follow; a quota below what the VM
// holds takes nothing back, it only refuses new allocations until enough
// is freed.
func (v *VM) SetMemoryQuota(bytes uint64) error {
	if v.gpuMem == nil {
		return fmt.Errorf("vm %q: memory quota: %w", v.cfg.Name, ErrNoQuota)
	}
	v.quotaMu.Lock()
	defer v.quotaMu.Unlock()
	v.gpuMem.SetMemoryQuota(bytes)
	v.quota.Store(bytes)
	return nil
}

// Memory is the VM's device memory quota (0: none) and what the VM holds
// now (buffers; on a GPU modules and local memory too) (0 on a backend that does not count it).
func (v *VM) Memory() (quota, used uint64) {
	if v.gpuMem != nil {
		used = v.gpuMem.MemoryUsed()
	}
	return v.quota.Load(), used
}

// SetMaxCommand changes the longest command the VM may run, in ns (> 0):
// the longest THROTTLE its channels accept from their next record, the
// header's max_throttle_ns, and the backend's limit on a command's run
// (commands past it fail with abi.ErrTimedOut).
func (v *VM) SetMaxCommand(ns int64) error {
	if ns <= 0 {
		return fmt.Errorf("vm %q: a longest command of %d ns: %w", v.cfg.Name, ns, ErrBadLimit)
	}
	v.limitMu.Lock()
	defer v.limitMu.Unlock()
	lim := v.cfg.Limits
	lim.MaxThrottleNs = uint64(ns)
	for _, c := range v.channels {
		c.SetLimits(lim)
	}
	if v.gpuLim != nil {
		v.gpuLim.SetMaxCommand(ns)
	}
	v.mu.Lock()
	if v.mem != nil {
		v.region.Store64(abi.HdrMaxThrottleNs, uint64(ns))
	}
	v.mu.Unlock()
	v.maxCmd.Store(ns)
	return nil
}

// MaxCommand is the longest command the VM may run, in ns, and how often
// one ran past it and the backend ended the VM's work (cuda: its GPU
// worker killed by the watchdog; 0 on a backend without a limit).
func (v *VM) MaxCommand() (ns, timeouts int64) {
	if v.gpuLim != nil {
		timeouts = v.gpuLim.Timeouts()
	}
	return v.maxCmd.Load(), timeouts
}

// Budget is the state of the VM's in-flight budget (channel.Budget, shared
// by its channels): its bound (0 while the scheduler's gate has set none),
// the estimated GPU time forwarded and not completed, what a work command
// costs now and how often a channel stopped for room.
func (v *VM) Budget() channel.BudgetStats {
	if len(v.channels) == 0 {
		return channel.BudgetStats{}
	}
	if b := v.channels[0].Budget(); b != nil {
		return b.Stats()
	}
	return channel.BudgetStats{}
}

// Syscalls is the VM's syscall forwarder, nil when the VM serves none.
func (v *VM) Syscalls() *syscalls.Forwarder { return v.sys }

// Stats is a snapshot of the VM's channels and counters.
type Stats struct {
	Doorbells uint64
	Channels  []channel.Snapshot
	Total     channel.Counters
	// DoorbellsLimited counts the guests' doorbells taken late, in one
	// read each mute, for ringing over Config.DoorbellLimit.
	DoorbellsLimited uint64
}

// DoorbellsLimited counts the doorbells the VM's guests rang on a vector
// muted for ringing over Config.DoorbellLimit.
func (v *VM) DoorbellsLimited() uint64 {
	if srv := v.waker.srv.Load(); srv != nil {
		return srv.Limited()
	}
	return 0
}

// Stats sums the VM's channels.
// SetUsageNotify has fn called after each completion on any of the VM's
// channels (channel.Channel.SetUsageNotify).
func (v *VM) SetUsageNotify(fn func()) {
	for _, c := range v.channels {
		c.SetUsageNotify(fn)
	}
}

// UsageGen moves whenever the usage counters of one of the VM's channels
// do (channel.Channel.UsageGen): a reader that saw the same value before
// need not read them again.
func (v *VM) UsageGen() uint64 {
	var g uint64
	for _, c := range v.channels {
		g += c.UsageGen()
	}
	return g
}

func (v *VM) Stats() Stats {
	s := Stats{Doorbells: v.doorbells.Load(), Channels: make([]channel.Snapshot, len(v.channels))}
	s.DoorbellsLimited = v.DoorbellsLimited()
	for i, c := range v.channels {
		cs := c.Snapshot()
		s.Channels[i] = cs
		s.Total.Doorbells += cs.Doorbells
		s.Total.Commands += cs.Commands
		s.Total.Kernels += cs.Kernels
		s.Total.Errors += cs.Errors
		s.Total.BusyNs += cs.BusyNs
	}
	return s
}

// StopDoorbells disconnects the guest and stops forwarding; commands in
// flight still complete. Close does it too; calling it first on every VM
// lets a daemon stop all guests before waiting for any GPU work.
func (v *VM) StopDoorbells() error {
	v.mu.Lock()
	srv := v.server
	v.server = nil
	v.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Close()
		if t := v.bell.trace; t != nil { // the doorbell goroutine has ended
			if terr := t.write(); terr != nil {
				slog.Warn("spin trace", "vm", v.cfg.Name, "err", terr)
			}
		}
	}
	// The channels stay: their counters are the VM's final usage.
	for _, c := range v.channels {
		c.Close()
	}
	return err
}

// Close stops the doorbells, drains the backend (queued commands complete
// with abi.ErrShutdown and are published) and frees the region.
func (v *VM) Close() error {
	return v.release()
}

func (v *VM) release() error {
	v.mu.Lock()
	live := v.server != nil
	v.mu.Unlock()
	if v.cfg.Store != nil && live { // deleted, not exported nor failed to start
		v.unstoreAll(v.Peers())
	}
	errs := []error{v.StopDoorbells()}
	// Before the GPU: calls in flight fail with EIO, and calls kernels make
	// while the GPU drains are refused with EIO too, so that a kernel still
	// making calls ends instead of holding the backend's Close.
	refusing := func() {}
	if v.sys != nil {
		errs = append(errs, v.sys.Close())
		l := v.cfg.Layout
		head := v.sys.RingHead()
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			syscalls.Refuse(shm.New(v.region.Bytes(l.SyscallOff, l.SyscallSize)), int(l.SyscallSlots), head, stop)
		}()
		refusing = func() { close(stop); <-done } // before the region is unmapped
	}
	if v.gpu != nil {
		errs = append(errs, v.gpu.Close())
		v.gpu = nil
	}
	refusing()
	errs = append(errs, v.closeSysRing())
	v.mu.Lock()
	if v.mem != nil {
		errs = append(errs, shm.Unmap(v.mem))
		v.mem = nil
	}
	v.mu.Unlock()
	if v.memfd >= 0 {
		errs = append(errs, unix.Close(v.memfd))
		v.memfd = -1
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("closing vm %q: %w", v.cfg.Name, err)
	}
	return nil
}
