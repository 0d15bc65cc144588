// Package daemon is sluiced's core: the registry of VM endpoints on one
// backend, their persistence in the state directory, and the operations the
// host API exposes. Lock order: Daemon.mu, then journaler.mu (the usage
// journal), then a VM's own locks and the ledger's.
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/internal/sockfile"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/internal/accounting"
	"github.com/sluice-gpu/sluice/mediator/internal/engine"
	"github.com/sluice-gpu/sluice/mediator/internal/gate"
	"github.com/sluice-gpu/sluice/mediator/internal/sched"
	"github.com/sluice-gpu/sluice/mediator/internal/spin"
	"github.com/sluice-gpu/sluice/mediator/internal/usage"
	"github.com/sluice-gpu/sluice/mediator/internal/vm"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
)

// Version is stamped at build time.
var Version = "dev"

// Daemon owns the backend and the VMs.
type Daemon struct {
	cfg    Config
	be     backend.Backend
	ledger *usage.Ledger
	epoch  uint64
	// handovers counts the hand-overs since the daemon started afresh.
	handovers uint32
	engine    *engine.Engine
	poller    *accounting.Poller // nil when accounting is off or the clock is virtual
	stop      context.CancelFunc
	done      chan struct{}
	lock      *stateLock // the state dir's, held until Close

	spin *spin.Budget // the CPU the VMs' doorbell goroutines may spin

	journal *journaler // nil when Config.JournalInterval is 0

	mu       sync.Mutex
	vms      map[string]*entry
	vmsGen   atomic.Uint64   // moves whenever vms does, for the journal's list
	deleting map[string]bool // names being torn down outside mu
	nextID   uint32
}

type entry struct {
	vm   *vm.VM
	req  hostapi.CreateVMRequest
	base usage.Record // usage before this endpoint existed
	// journaled is what of this endpoint's counts the journal holds, and
	// jgen the VM's UsageGen when they were read (guarded by journaler.mu).
	journaled usage.Record
	jgen      uint64
}

// New opens the backend and the state directory and re-creates the VMs that
// existed when the daemon last stopped.
func New(cfg Config) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, dir := range []string{cfg.StateDir, cfg.EndpointDir, filepath.Dir(cfg.Socket)} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	lock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	d, err := open(cfg, lock, nil)
	if err != nil {
		return nil, errors.Join(err, lock.release())
	}
	return d, nil
}

// open is New once the state dir is locked, or Adopt with the hand-over
// m; Close releases the lock.
func open(cfg Config, lock *stateLock, m *Manifest) (*Daemon, error) {
	if cfg.Proxy.Binary != "off" {
		// The VMs' sandboxes must reach their volumes: search (o+x) but no
		// listing for others on the state dir and the volumes' dir.
		if err := os.MkdirAll(cfg.Proxy.VolumeDir, 0o711); err != nil {
			return nil, fmt.Errorf("creating %s: %w", cfg.Proxy.VolumeDir, err)
		}
		for _, dir := range []string{cfg.StateDir, cfg.Proxy.VolumeDir} {
			if err := addSearch(dir); err != nil {
				return nil, err
			}
		}
	}
	ledger, err := openLedger(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	be, err := backend.Open(cfg.Backend, backend.Options{Clock: cfg.Clock, Params: cfg.BackendParams})
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, be: be, ledger: ledger, epoch: newEpoch(), vms: map[string]*entry{}, deleting: map[string]bool{}, nextID: 1}
	d.spin = spin.NewBudget(cfg.DoorbellSpin.Cores)
	if m != nil && m.Epoch != 0 { // a hand-over: the guests go on with the same mediator
		d.epoch, d.nextID, d.handovers = m.Epoch, max(m.NextID, 1), m.Handovers
	}
	saved, err := d.loadVMs()
	if err != nil {
		be.Close()
		return nil, err
	}
	if err := d.startScheduling(saved.Policy); err != nil {
		be.Close()
		return nil, err
	}
	if d.journal, err = startJournal(cfg.StateDir, cfg.JournalInterval, ledger, d.tryEntries); err != nil {
		d.Close() // the caller releases the lock
		return nil, err
	}
	if err := d.restore(saved, adoptions(m)); err != nil {
		d.Close() // the caller releases the lock
		return nil, err
	}
	d.lock = lock
	return d, nil
}

// startScheduling creates the engine under the policy persisted (a policy
// set at run time wins over --policy) and, where the backend can be polled
// in real time, the accounting poller that drives it.
func (d *Daemon) startScheduling(persisted string) error {
	name := d.cfg.Policy
	if persisted != "" && checkAccountingPolicy(d.cfg.Accounting.Method, persisted) != nil {
		slog.Warn("accounting is off: the policy persisted is not restored", "policy", persisted, "now", name)
	} else if persisted != "" {
		name = persisted
	}
	policy, err := sched.ParsePolicy(name)
	if err != nil {
		return fmt.Errorf("restoring policy: %w", err)
	}
	if d.engine, err = engine.New(sched.Config{Policy: policy}); err != nil {
		return err
	}
	d.engine.SetBudget(int64(d.cfg.InflightBudget)) // 0: derived from the period; negative: none
	if a := d.cfg.ResolvedArbitration(); a != gate.ArbitrationDriver {
		cfg := gate.TurnConfig{QuantumNs: int64(d.cfg.Quantum), Clock: gate.WallClock(d.be.Clock().Now), Preempts: backend.TimeSlices(d.be),
			HandoffNs: gate.HandoffSetting(d.cfg.Handoff)}
		if err := d.engine.SetArbitration(a, cfg); err != nil {
			return err
		}
	}
	sr, ok := d.be.(backend.StatusReader)
	if !ok || d.cfg.Accounting.Method == accounting.MethodOff || d.cfg.Clock != "wall" {
		return nil
	}
	d.poller, err = accounting.NewWall(d.cfg.Accounting, sr, d.be.Clock().Now, d.engine.OnPeriod)
	if err != nil {
		return fmt.Errorf("starting accounting: %w", err)
	}
	d.poller.SetWaiting(d.engine.Waiting)
	ctx, cancel := context.WithCancel(context.Background())
	d.stop, d.done = cancel, make(chan struct{})
	go func() {
		defer close(d.done)
		_ = d.poller.Run(ctx) // ends only when ctx does
	}()
	return nil
}

func newEpoch() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano())
	}
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// Epoch identifies this run of the daemon (published in every header).
func (d *Daemon) Epoch() uint64 { return d.epoch }

// Config returns the validated configuration.
func (d *Daemon) Config() Config { return d.cfg }

// CreateVM creates a VM endpoint.
func (d *Daemon) CreateVM(_ context.Context, req hostapi.CreateVMRequest) (hostapi.VM, error) {
	if err := checkPlacement(req, true); err != nil {
		return hostapi.VM{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.createLocked(req, nil)
	if err != nil {
		return hostapi.VM{}, err
	}
	if err := d.saveVMsLocked(); err != nil {
		// Not persisted means not created: a restart would lose it.
		e := d.vms[req.Name]
		delete(d.vms, req.Name)
		d.vmsGen.Add(1)
		return hostapi.VM{}, errors.Join(fmt.Errorf("creating vm %q: %w", req.Name, err), e.vm.Close())
	}
	slog.Info("vm created", "vm", v.Name, "weight", v.Weight, "channels", v.Channels, "endpoint", v.Endpoint)
	return v, nil
}

// createLocked creates a VM, or with adopt takes over the one a
// predecessor handed over.
func (d *Daemon) createLocked(req hostapi.CreateVMRequest, adopt *VMHandover) (hostapi.VM, error) {
	p, err := d.prepareLocked(req, adopt, nil)
	if err != nil {
		return hostapi.VM{}, err
	}
	v, err := vm.New(p.cfg, d.be)
	if err != nil {
		return hostapi.VM{}, fmt.Errorf("creating vm %q: %w", p.req.Name, classify(err))
	}
	return d.addLocked(p, v)
}

// pendingVM is a VM prepared (prepareLocked) and not yet added: the
// request with the daemon's defaults, its endpoint's configuration and
// the usage it starts from (known: the ledger had it).
type pendingVM struct {
	req   hostapi.CreateVMRequest
	cfg   vm.Config
	base  usage.Record
	known bool
}

// prepareLocked checks req (pending: the names prepared and not yet
// added, which it may not take either) and describes the endpoint that
// vm.New makes, numbered.
func (d *Daemon) prepareLocked(req hostapi.CreateVMRequest, adopt *VMHandover, pending map[string]bool) (pendingVM, error) {
	if !hostapi.ValidName(req.Name) {
		return pendingVM{}, fmt.Errorf("vm name %q: want 1-63 of letters, digits, '.', '_', '-', starting with a letter or digit: %w", req.Name, hostapi.ErrInvalid)
	}
	if _, ok := d.vms[req.Name]; ok || d.deleting[req.Name] || pending[req.Name] {
		return pendingVM{}, fmt.Errorf("vm %q: %w", req.Name, hostapi.ErrExists)
	}
	if len(d.vms)+len(pending) >= d.cfg.MaxVMs {
		return pendingVM{}, fmt.Errorf("vm %q: limit of %d vms reached: %w", req.Name, d.cfg.MaxVMs, hostapi.ErrUnavailable)
	}
	req = d.withDefaults(req)
	if err := hostapi.CheckWeight(req.Weight); err != nil {
		return pendingVM{}, fmt.Errorf("vm %q: %w", req.Name, err)
	}
	sock := filepath.Join(d.cfg.EndpointDir, req.Name+".sock")
	if err := sockfile.CheckPath(sock); err != nil {
		return pendingVM{}, fmt.Errorf("vm %q: its endpoint's %w (give it a shorter name, or sluiced a shorter --endpoint-dir): %w", req.Name, err, hostapi.ErrInvalid)
	}
	if err := checkPlacement(req, false); err != nil {
		return pendingVM{}, err
	}
	limits := d.cfg.Limits
	if ns := req.MaxCommandNs; ns != 0 { // 0: the daemon's, followed across restarts
		if err := checkMaxCommand(ns); err != nil {
			return pendingVM{}, fmt.Errorf("vm %q: %w", req.Name, err)
		}
		limits.MaxThrottleNs = uint64(ns)
	}
	owners, err := resolveOwner(req.Owner)
	if err != nil {
		return pendingVM{}, fmt.Errorf("vm %q: %w", req.Name, err)
	}
	req.Owner = ownerString(owners) // kept in numbers: names are this host's
	if err := d.prepareVolume(&req); err != nil {
		return pendingVM{}, err
	}
	l, err := abi.NewLayout(abi.LayoutConfig{
		RegionSize:   req.RegionSize,
		Channels:     req.Channels,
		RingEntries:  req.RingEntries,
		SyscallSlots: d.cfg.Layout.SyscallSlots,
	})
	if err != nil {
		return pendingVM{}, fmt.Errorf("vm %q: %w: %w", req.Name, hostapi.ErrInvalid, err)
	}
	id := d.nextID
	var handed *vm.Handover
	if adopt != nil {
		handed = &adopt.VM
	}
	if adopt != nil && adopt.ID != 0 {
		id = adopt.ID // under m.NextID (DecodeManifest)
	} else {
		d.nextID++
	}
	base, ok := d.ledger.Get(req.Name)
	if !ok {
		base = usage.Record{Since: time.Now().UTC()}
	}
	cfg := vm.Config{
		Name:        req.Name,
		ID:          id,
		Weight:      req.Weight,
		Layout:      l,
		Limits:      limits,
		Socket:      sock,
		SocketMode:  os.FileMode(d.cfg.SocketMode),
		Epoch:       d.epoch,
		MaxPeers:    d.cfg.MaxPeers,
		Owners:      owners,
		StartProxy:  d.proxyStarter(req, id),
		Syscalls:    d.cfg.Syscalls,
		GPUBaseNs:   base.GPUNs,
		MemoryQuota: req.Memory,
		MaxFileSize: d.cfg.Proxy.MaxFileSize, // the proxy's too (proxyStarter)

		SpinWindow:    d.cfg.DoorbellSpin.Window,
		SpinBudget:    d.spin,
		DoorbellLimit: d.cfg.DoorbellLimit,

		Adopt: handed,
		Store: d.cfg.FDStore,
	}
	return pendingVM{req: req, cfg: cfg, base: base, known: ok}, nil
}

// addLocked adds v, the endpoint made of p, to the scheduler and the
// daemon's VMs; on error v is closed.
func (d *Daemon) addLocked(p pendingVM, v *vm.VM) (hostapi.VM, error) {
	req, id, base := p.req, p.cfg.ID, p.base
	chans := make([]gate.Channel, 0, len(v.Channels()))
	for _, c := range v.Channels() {
		chans = append(chans, c)
	}
	if err := d.engine.AddVM(id, req.Name, req.Weight, req.Cap, chans); err != nil {
		return hostapi.VM{}, errors.Join(fmt.Errorf("vm %q: %w: %w", req.Name, hostapi.ErrInvalid, err), v.Close())
	}
	if !p.known {
		d.ledger.Put(req.Name, base)
	}
	e := &entry{vm: v, req: req, base: base}
	if d.journal != nil {
		v.SetUsageNotify(d.journal.poke)
	}
	d.vms[req.Name] = e
	d.vmsGen.Add(1)
	return describe(e), nil
}

func (d *Daemon) withDefaults(req hostapi.CreateVMRequest) hostapi.CreateVMRequest {
	if req.Weight == 0 {
		req.Weight = 1
	}
	if req.Channels == 0 {
		req.Channels = d.cfg.Layout.Channels
	}
	if req.RingEntries == 0 {
		req.RingEntries = d.cfg.Layout.RingEntries
	}
	if req.RegionSize == 0 {
		req.RegionSize = d.cfg.Layout.RegionSize
	}
	return req
}

// DeleteVM tears a VM down; its usage stays in the ledger. The wait for
// its GPU work happens outside the daemon lock, so other VMs and the host
// API carry on meanwhile.
func (d *Daemon) DeleteVM(_ context.Context, name string) error {
	d.mu.Lock()
	e, ok := d.vms[name]
	if !ok {
		d.mu.Unlock()
		return fmt.Errorf("vm %q: %w", name, hostapi.ErrNotFound)
	}
	delete(d.vms, name)
	d.vmsGen.Add(1)
	d.deleting[name] = true
	d.engine.RemoveVM(e.vm.Config().ID)
	saveErr := d.saveVMsLocked()
	d.mu.Unlock()

	closeErr := e.vm.Close()
	// Persisted before the name is free again: a VM created under it
	// starts from the ledger.
	persistErr := d.persist([]*entry{e})

	d.mu.Lock()
	delete(d.deleting, name)
	d.mu.Unlock()
	if err := errors.Join(saveErr, closeErr, persistErr); err != nil {
		slog.Warn("vm deleted with errors", "vm", name, "err", err)
		return fmt.Errorf("deleting vm %q: %w", name, err)
	}
	slog.Info("vm deleted", "vm", name, "gpu_ns", e.usage().GPUNs)
	return nil
}

// GetVM describes one VM.
func (d *Daemon) GetVM(_ context.Context, name string) (hostapi.VM, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.vms[name]
	if !ok {
		return hostapi.VM{}, fmt.Errorf("vm %q: %w", name, hostapi.ErrNotFound)
	}
	return describe(e), nil
}

// ListVMs describes every VM, sorted by name.
func (d *Daemon) ListVMs(_ context.Context) ([]hostapi.VM, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]hostapi.VM, 0, len(d.vms))
	for _, e := range d.sortedLocked() {
		out = append(out, describe(e))
	}
	return out, nil
}

// Usage returns a VM's cumulative usage; deleted VMs keep theirs.
func (d *Daemon) Usage(_ context.Context, name string) (hostapi.Usage, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var r usage.Record
	if e, ok := d.vms[name]; ok {
		r = e.usage()
	} else if rec, ok := d.ledger.Get(name); ok {
		r = rec
	} else {
		return hostapi.Usage{}, fmt.Errorf("vm %q: %w", name, hostapi.ErrNotFound)
	}
	return toUsage(name, r), nil
}

// Stats snapshots every VM for live views.
func (d *Daemon) Stats(_ context.Context) (hostapi.Stats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.be.Clock().Now()
	s := hostapi.Stats{Backend: d.cfg.Backend, Clock: d.cfg.Clock, Now: now,
		Policy: string(d.engine.Policy()), Accounting: d.accountingName(), Periods: d.engine.Periods()}
	if d.poller != nil {
		s.PollerCPUNs = d.poller.CPUNs()
	}
	arb, turn := d.engine.Arbitration()
	s.Arbitration = string(arb)
	if arb == gate.ArbitrationTurns {
		s.QuantumNs, s.Turns, s.TurnOverruns = turn.QuantumNs, turn.Turns, turn.Overruns
	}
	if auto := d.engine.Auto(); auto.On {
		s.ArbitrationAuto, s.ArbitrationSwitches = true, auto.Switches
	}
	sched := map[uint32]engine.VMStats{}
	for _, st := range d.engine.Stats(now) {
		sched[st.ID] = st
	}
	for _, e := range d.sortedLocked() {
		vs := statsOf(e)
		if st, ok := sched[e.vm.Config().ID]; ok {
			vs.AccountedNs, vs.Share, vs.Held, vs.HeldNs, vs.LagNs = st.Accounted, st.Share, st.Held, st.HeldNs, st.LagNs
		}
		if turn.Held && turn.Holder == e.vm.Config().ID {
			vs.TurnHolder, s.TurnHolder = true, e.req.Name
		}
		s.GPUBusyNs += vs.Usage.GPUNs
		s.VMs = append(s.VMs, vs)
	}
	return s, nil
}

// Version describes the daemon.
func (d *Daemon) Version(context.Context) (hostapi.Version, error) {
	return hostapi.Version{
		Version: Version, ABIMajor: abi.VersionMajor, ABIMinor: abi.VersionMinor,
		Backend: d.cfg.Backend, Clock: d.cfg.Clock, Epoch: d.epoch, Handovers: d.handovers,
	}, nil
}

func (d *Daemon) sortedLocked() []*entry {
	es := make([]*entry, 0, len(d.vms))
	for _, e := range d.vms {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].req.Name < es[j].req.Name })
	return es
}

// Heartbeat publishes liveness into every VM's header and, without a
// journal, persists usage (the journal commits on its own interval).
func (d *Daemon) Heartbeat() error {
	d.mu.Lock()
	now := uint64(time.Now().UnixNano())
	for _, e := range d.vms {
		e.vm.Heartbeat(now)
	}
	d.mu.Unlock()
	if d.journal != nil {
		return nil
	}
	return d.persist(d.entries())
}

// entries lists the VMs.
func (d *Daemon) entries() []*entry {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sortedLocked()
}

// persist puts what es used on stable storage: a journal commit, or
// without a journal the ledger's flush.
func (d *Daemon) persist(es []*entry) error {
	if d.journal != nil {
		_, err := d.journal.commit(es, true)
		return err
	}
	for _, e := range es {
		d.ledger.Put(e.req.Name, e.usage())
	}
	return d.ledger.Flush()
}

// Close stops every VM (their state stays on disk for the next start),
// flushes the ledger and closes the backend. All guests are stopped before
// any GPU work is waited for, and the waits run in parallel.
func (d *Daemon) Close() error {
	if d.journal != nil {
		d.journal.close() // its loop takes d.mu; the last commits are Close's
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, e := range d.vms {
		errs = append(errs, e.vm.StopDoorbells())
	}
	errs = append(errs, d.flushLocked())
	var wg sync.WaitGroup
	closeErrs := make([]error, 0, len(d.vms))
	var mu sync.Mutex
	for _, e := range d.vms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := e.vm.Close()
			mu.Lock()
			closeErrs = append(closeErrs, err)
			mu.Unlock()
		}()
	}
	wg.Wait()
	errs = append(errs, closeErrs...)
	if d.stop != nil {
		d.stop()
		<-d.done
		d.stop = nil
	}
	errs = append(errs, d.flushLocked(), d.be.Close())
	if d.journal != nil {
		errs = append(errs, d.journal.finish(d.sortedLocked()))
	}
	clear(d.vms)
	errs = append(errs, d.lock.release()) // last: the ledger is on disk
	return errors.Join(errs...)
}

func (d *Daemon) flushLocked() error {
	return d.persist(d.sortedLocked())
}

// classify maps lower layers' errors onto the host API's sentinels.
func classify(err error) error {
	switch {
	case errors.Is(err, ivshmem.ErrSocketInUse):
		return fmt.Errorf("%w: %w", hostapi.ErrExists, err)
	case errors.Is(err, backend.ErrInvalid), errors.Is(err, vm.ErrNoQuota):
		return fmt.Errorf("%w: %w", hostapi.ErrInvalid, err)
	case errors.Is(err, backend.ErrClosed):
		return fmt.Errorf("%w: %w", hostapi.ErrUnavailable, err)
	}
	return err
}

// vmsFile is the persisted list of VMs, re-created on start.
type vmsFile struct {
	Version int                       `json:"version"`
	Policy  string                    `json:"policy,omitempty"`
	VMs     []hostapi.CreateVMRequest `json:"vms"`
}

func (d *Daemon) saveVMsLocked() error {
	// The policy set last, not the one in force: a change applies at the
	// next period, and a restart before it must not bring the old one back.
	f := vmsFile{Version: 1, Policy: string(d.engine.NextPolicy())}
	for _, e := range d.sortedLocked() {
		f.VMs = append(f.VMs, e.req)
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding vm list: %w", err)
	}
	return usage.WriteFileAtomic(filepath.Join(d.cfg.StateDir, "vms.json"), b)
}

// loadVMs reads the persisted VM list and policy (none on a first start).
func (d *Daemon) loadVMs() (vmsFile, error) {
	var f vmsFile
	b, err := os.ReadFile(filepath.Join(d.cfg.StateDir, "vms.json"))
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("reading vm list: %w", err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("decoding vm list in %s: %w", d.cfg.StateDir, err)
	}
	if f.Version != 1 {
		return f, fmt.Errorf("vm list in %s has version %d, want 1", d.cfg.StateDir, f.Version)
	}
	return f, nil
}

// restore re-creates the persisted VMs (the engine has the policy), taking
// over those a predecessor handed over (adopt, by name); the descriptors
// of a VM handed over that is not in the list are closed. The endpoints
// are made in parallel: taking one over may wait for its device state
// (the cuda backend's adoption of a GPU worker, up to its budget), and
// one VM's wait must not hold the others' guests. They are numbered and
// added in the list's order.
func (d *Daemon) restore(f vmsFile, adopt map[string]*VMHandover) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	pending := map[string]bool{}
	var ps []pendingVM
	for _, req := range f.VMs {
		if req.Weight > hostapi.MaxWeight { // taken before the range was one
			slog.Warn("restoring a vm: its weight is past the most, lowered to it", "vm", req.Name, "weight", req.Weight, "now", hostapi.MaxWeight)
			req.Weight = hostapi.MaxWeight
		}
		a := adopt[req.Name]
		delete(adopt, req.Name)
		p, err := d.prepareLocked(req, a, pending)
		if err != nil {
			return fmt.Errorf("restoring vm %q: %w", req.Name, err)
		}
		pending[req.Name] = true
		ps = append(ps, p)
	}
	vs := make([]*vm.VM, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vs[i], errs[i] = vm.New(p.cfg, d.be)
		}()
	}
	wg.Wait()
	for i, p := range ps {
		if errs[i] != nil {
			errs[i] = fmt.Errorf("restoring vm %q: creating it: %w", p.req.Name, classify(errs[i]))
			continue
		}
		v, err := d.addLocked(p, vs[i])
		if err != nil {
			errs[i] = fmt.Errorf("restoring vm %q: %w", p.req.Name, err)
			continue
		}
		slog.Info("vm restored", "vm", v.Name, "weight", v.Weight, "channels", v.Channels, "endpoint", v.Endpoint, "adopted", p.cfg.Adopt != nil)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for name, a := range adopt {
		slog.Warn("a vm handed over is not in the vm list: closed", "vm", name)
		closeFDs(a.VM.FDs())
		if d.cfg.FDStore != nil {
			// Its endpoint's socket and its device state (a GPU worker
			// whose socket the store holds) must not outlive it there.
			if err := vm.Unstore(d.cfg.FDStore, name, a.VM); err != nil {
				slog.Warn("fd store: a vm handed over that is not in the vm list stays stored", "vm", name, "err", err)
			}
		}
	}
	return nil
}
