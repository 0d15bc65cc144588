package sim

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

func init() {
	backend.Register("sim", func(o backend.Options) (backend.Backend, error) { return New(o) })
}

// Engine names one of the simulated GPU's engines.
type Engine int

// The engines. ReadStatus lists busy engines in this order.
const (
	Compute Engine = iota
	Copy
	numEngines
)

func (e Engine) String() string {
	switch e {
	case Compute:
		return "compute"
	case Copy:
		return "copy"
	}
	return "engine?"
}

// EngineOf is the engine that runs op: the copy engine for COPY, the compute
// engine for everything else.
func EngineOf(op abi.Opcode) Engine {
	if op == abi.OpCopy {
		return Copy
	}
	return Compute
}

// ErrNotManual is returned by Run, RunUntilIdle and Step on a backend whose
// timeline a backend goroutine drives.
var ErrNotManual = errors.New("sim: not opened with drive=manual")

// ErrDriving is returned by Run, RunUntilIdle and Step while another of them
// is in progress (from another goroutine, or from inside a callback).
var ErrDriving = errors.New("sim: timeline already being driven")

// Sim is one simulated GPU. It implements backend.Backend and
// backend.StatusReader.
type Sim struct {
	p      Params
	wall   bool
	manual bool
	epoch  time.Time // wall clock zero
	vnow   atomic.Int64

	mu      sync.Mutex
	now     int64 // the timeline: every event at or before now has been processed
	seq     uint64
	events  eventHeap
	engines [numEngines]engine
	active  []*channel // the channel table's active bits, in no particular order
	vms     map[uint32]*simVM
	stats   map[uint32]*vmStats // by VM ID, kept after detach
	memUsed uint64
	nEvents uint64
	pending []delivery // completions and After functions due, in timeline order
	closed  bool       // Close began: no Attach, no After
	quit    bool       // Close detached every VM: the loop goroutine ends

	// The loop goroutine (drive=loop).
	sleeping   bool
	sleepUntil int64 // wall: the event time its timer is set for
	wake       chan struct{}
	loopDone   chan struct{}

	driving atomic.Bool // a goroutine is delivering (drive=manual)

	// Programs (LAUNCH of a built-in program, progsim.go).
	starting *launch // set by execLaunch, taken by dispatchEngineLocked at once
	moving   func()  // set by execMemset and execCopy, likewise (effects.go), and by the commands that change the device files' state
	data     bool    // moving is a MEMSET's or COPY's
	// beforeMove, when set (by tests), runs in a mover before each data
	// movement, without the lock.
	beforeMove func()
	holds      int        // virtual clock: programs running, which hold the timeline
	parkedFx   int        // commands ended whose effect is not done (effects.go): on the virtual clock they hold it too
	progEnd    *sync.Cond // on mu: broadcast when a program ends
}

// engine is one engine and its share of the dispatcher.
type engine struct {
	ch         *channel // running a command of ch's, or nil when idle
	ref        backend.ChannelRef
	stats      *vmStats
	start, end int64
	orphan     bool           // the VM detached; the command's completion is delivered already
	ready      ring[*channel] // channels whose next command is for this engine, round robin
	busy       int64          // ns of completed commands
	prog       *launch        // the program running, whose end is open until it finishes
	fx         *effect        // the running command's data movement, nil without
	code       abi.ErrorCode  // what the running command completes with
	// Time slices (Params.TimesliceNs): start and end are the running
	// slice's; the command started at first, ran ran ns before this slice
	// and has rest ns to run after it (0: it ends at end).
	first, ran, rest int64
}

type vmStats struct{ busy int64 }

// delivery is a completion (vm set) or an After function (fn set) to call
// outside the lock.
type delivery struct {
	vm *simVM
	fn func()
	c  backend.Completion
}

var (
	_ backend.Backend      = (*Sim)(nil)
	_ backend.StatusReader = (*Sim)(nil)
)

// New opens a simulated GPU. Clock is "wall" (the default) or "virtual";
// Params are described by the Params type.
func New(o backend.Options) (*Sim, error) {
	p, err := ParseParams(o.Params)
	if err != nil {
		return nil, err
	}
	s := &Sim{p: p, epoch: time.Now(), vms: map[uint32]*simVM{}, stats: map[uint32]*vmStats{}}
	s.progEnd = sync.NewCond(&s.mu)
	switch o.Clock {
	case "", "wall":
		s.wall = true
	case "virtual":
	default:
		return nil, fmt.Errorf("sim clock %q: %w: want \"wall\" or \"virtual\"", o.Clock, backend.ErrInvalid)
	}
	s.manual = p.Drive == DriveManual
	if s.manual && s.wall {
		return nil, fmt.Errorf("sim param \"drive\"=%q: %w: manual drive needs the virtual clock", p.Drive, backend.ErrInvalid)
	}
	if !s.manual {
		s.wake = make(chan struct{}, 1)
		s.loopDone = make(chan struct{})
		go s.loop()
	}
	return s, nil
}

// TimeSlices reports whether the compute engine time-slices between VMs
// (Params.TimesliceNs).
func (s *Sim) TimeSlices() bool { return s.p.TimesliceNs > 0 }

// Params returns the cost model in use.
func (s *Sim) Params() Params { return s.p }

// Attach creates a VM with spec.Channels channels.
func (s *Sim) Attach(spec backend.VMSpec) (backend.VM, error) {
	if spec.Channels < 1 || spec.Channels > abi.MaxChannels {
		return nil, fmt.Errorf("attaching VM %d: %w: %d channels, want 1..%d", spec.ID, backend.ErrInvalid, spec.Channels, abi.MaxChannels)
	}
	if spec.Complete == nil {
		return nil, fmt.Errorf("attaching VM %d: %w: no Complete callback", spec.ID, backend.ErrInvalid)
	}
	if spec.MaxCommandNs < 0 {
		return nil, fmt.Errorf("attaching VM %d: %w: a longest command of %d ns", spec.ID, backend.ErrInvalid, spec.MaxCommandNs)
	}
	var area *slotcall.Area
	if spec.Syscalls != nil {
		var err error
		if area, err = slotcall.New(spec.Syscalls); err != nil {
			return nil, fmt.Errorf("attaching VM %d: %w: syscall area: %v", spec.ID, backend.ErrInvalid, err)
		}
	}
	d, k, err := s.openDev(spec.Adopt)
	if err != nil {
		return nil, fmt.Errorf("attaching VM %d: %w", spec.ID, err)
	}
	refuse := func(err error) (backend.VM, error) {
		d.close()
		return nil, fmt.Errorf("attaching VM %d: %w", spec.ID, err)
	}
	if spec.RingHead != nil {
		head := spec.RingHead()
		if spec.Adopt != nil && area != nil && k.ringCtr > head+uint64(area.Slots()) {
			// At most a ring's length of claimed positions can be
			// unread: past that, new calls would land where the mediator
			// never looks.
			return refuse(fmt.Errorf("%w: claim counter %d, more than a ring past the mediator's head %d", backend.ErrBadKept, k.ringCtr, head))
		}
		k.ringCtr = max(k.ringCtr, head) // new calls land where the mediator reads
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return refuse(backend.ErrClosed)
	}
	if _, dup := s.vms[spec.ID]; dup {
		return refuse(fmt.Errorf("%w: ID in use", backend.ErrInvalid))
	}
	if k.used > s.p.Memory-s.memUsed {
		return refuse(fmt.Errorf("%w: its %d bytes of buffers are more than the %d free", backend.ErrBadKept, k.used, s.p.Memory-s.memUsed))
	}
	v := &simVM{s: s, id: spec.ID, heap: spec.Heap, area: area, complete: spec.Complete, quota: spec.MemoryQuota, maxCmd: spec.MaxCommandNs,
		bufs: k.bufs, mods: k.mods, memUsed: k.used, drained: make(chan struct{}, 1), dev: d, ringCtr: new(atomic.Uint64)}
	if d.ringCtr != nil {
		v.ringCtr = d.ringCtr // in the meta file
	}
	v.ringCtr.Store(k.ringCtr)
	s.memUsed += k.used
	v.chans = make([]*channel, spec.Channels)
	for i := range v.chans {
		v.chans[i] = &channel{vm: v, idx: i, activeAt: -1}
	}
	if s.stats[spec.ID] == nil {
		s.stats[spec.ID] = &vmStats{}
	}
	v.stats = s.stats[spec.ID]
	s.vms[spec.ID] = v
	return v, nil
}

// Close detaches every VM, as VM.Close does, and stops the backend. After
// functions still queued when Close begins never run.
func (s *Sim) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	vms := make([]*simVM, 0, len(s.vms))
	for _, v := range s.vms {
		vms = append(vms, v)
	}
	s.mu.Unlock()
	slices.SortFunc(vms, func(a, b *simVM) int { return int(a.id) - int(b.id) })
	for _, v := range vms {
		_ = v.Close() // only ever ErrClosed, when it raced with another Close
	}
	s.mu.Lock()
	s.quit = true
	s.notifyLocked()
	s.mu.Unlock()
	if s.loopDone != nil {
		<-s.loopDone
	}
	return nil
}

// Clock is the timeline: with the wall clock, monotonic ns since New; with
// the virtual clock, the simulated time.
func (s *Sim) Clock() backend.Clock { return simClock{s} }

type simClock struct{ s *Sim }

func (c simClock) Now() int64 {
	if c.s.wall {
		return c.s.wallNow()
	}
	return c.s.vnow.Load()
}

func (s *Sim) wallNow() int64 { return int64(time.Since(s.epoch)) }

func (s *Sim) setNowLocked(t int64) {
	if t > s.now {
		s.now = t
		s.vnow.Store(t)
	}
}

// After calls fn once the timeline reaches Now()+delay (a negative delay
// counts as 0), from the goroutine that drives the timeline, without locks
// held, in order with the completions due at the same time. After a backend
// Close, fn never runs.
func (s *Sim) After(delay int64, fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || fn == nil {
		return
	}
	if s.wall {
		s.advanceLocked(s.wallNow())
	}
	s.seq++
	s.events.push(event{t: s.now + min(max(delay, 0), maxCost), seq: s.seq, fn: fn, kind: evTimer})
	s.notifyLocked()
}
