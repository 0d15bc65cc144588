package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

func init() { backend.Register("cuda", Open) }

var le = binary.LittleEndian

// Defaults of the backend's options.
const (
	// DefaultGapNs is the longest step between two %globaltimer reads that
	// the throttle kernel counts as its own time: longer means its context
	// was switched out.
	DefaultGapNs = 20_000
	// DefaultStallCheck is how long a channel may make no progress before
	// its worker asks the stream whether the context faulted.
	DefaultStallCheck = 5 * time.Millisecond
	// DefaultRestartDelay is how long after a VM's GPU worker ended (its
	// context faulted, say) a new one starts; it doubles while workers keep
	// ending young.
	DefaultRestartDelay = time.Second
	// DefaultWorkerSpin is how long a VM's GPU worker keeps looking at its
	// ring after it emptied before it sleeps on the doorbell: a command
	// submitted within it starts without a wakeup of the worker process
	// (tens of microseconds).
	DefaultWorkerSpin = 100 * time.Microsecond
)

// Backend is one GPU driven through the CUDA driver API.
type Backend struct {
	spawn        spawner
	keepTruth    atomic.Bool // KeepGroundTruth was called
	needFiles    bool        // workers are processes: a heap comes with its file
	ordinal      int
	library      string
	name         string
	memory       uint64 // bytes
	pciBusID     string
	epoch        time.Time
	gap          uint64
	stall        int64
	restartDelay time.Duration
	workerSpin   time.Duration
	keepWait     time.Duration // Keep's wait for the commands in flight (keep.go)
	adoptWait    time.Duration // an adoption's budget, all of it (keep.go)

	mu         sync.Mutex // vms, closed, nextEngine
	vms        map[uint32]*cudaVM
	closed     bool
	nextEngine int

	// chans is every channel of the running VMs, for the completer and
	// ReadStatus; replaced (never modified) under mu. sweeping is held
	// (read) by whoever reads markers through it, so that a VM can wait
	// until nobody does before it frees them.
	chans    atomic.Pointer[[]*channel]
	sweeping sync.RWMutex

	outstanding atomic.Int64  // commands submitted and not yet delivered
	wake        chan struct{} // the completer has work (capacity 1)
	parked      atomic.Bool   // the completer waits on wake (Submit wakes it only then)
	stop        chan struct{}
	done        sync.WaitGroup // the completer and the deliverer

	ho *handoff // completions on their way to the deliverer, in order
	// inlined counts the completions the completer delivered itself
	// (inline); slowInline is its backoff after slow callbacks, slowScore
	// how often they were slow of late (completer).
	inlined    atomic.Int64
	slowInline int
	slowScore  int

	// The completer's: when it last swept and what ran then (see credit),
	// and the commands found past their VM's limit (watchdog.go).
	lastSweep int64
	prevSweep int64     // the sweep before the one in progress (completer)
	delivered bool      // the last sweep found completions (the hop diagnostic's)
	running   []runRef  // commands running at the last sweep
	now1      []runRef  // commands running at this sweep (its peek)
	unseen    []runRef  // commands that ran and ended between the last sweep and this one
	creditGen uint64    // credit's, numbering its splits
	ranVMs    []*cudaVM // credit's: the VMs that ran at an end of its interval, each once
	// Tracing (tracing.go), the completer's: whether tracing is on, and
	// when two VMs last ran at once.
	traceOn      bool
	overlapAt    int64
	tracedNs     atomic.Int64 // the intervals billed by the tracers
	untracedPart [2]float64   // credit's: an untraced VM's part of each end of a traced interval
	untracedLeft float64      // what the traced VMs left and the untraced were not yet given (splitUntraced)
	ovBusy       float64      // the fully traced intervals' busy time, ns (learnOverhead)
	ovLeft       float64      // and what their bills left of it
	carried      bool         // credit's: a VM was billed a carry past the interval's cap (tracedInterval)
	late         []lateRef

	// The switch overhead (switchcost.go): f's bits, whether Open
	// measures it, and the time credit billed to nobody for it (switchOwed
	// its fractions of a nanosecond: the completer's).
	switchF    atomic.Uint64
	switchAuto bool
	switchNs   atomic.Int64
	switchOwed float64

	hops *backendHops // the hop diagnostic (HopsEnv); nil: off

	clock func() int64 // the tests' timeline in place of the wall clock; nil: the wall clock
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.StatusReader = (*Backend)(nil)
)

// Open opens the GPU named by opts.Params: "device" (ordinal, default 0),
// "library" (the driver's path, default libcuda.so.1), and the durations
// "gap" (see DefaultGapNs; its old key gap_ns, in nanoseconds, still
// works), "stall_check", "restart_delay" and "worker_spin" (see
// DefaultStallCheck, DefaultRestartDelay and DefaultWorkerSpin; worker_spin
// 0: never spin), and "switch_overhead": the fraction of the time in
// which several VMs run at once that goes to switching between their
// contexts and is billed to none of them, "auto" (the default: measured
// here, once, see switchcost.go) or a number in [0, 0.5). The clock is
// always the wall clock. Each VM's context lives in a GPU worker process
// of its own.
func Open(opts backend.Options) (backend.Backend, error) {
	lib, err := loadLibcuda(opts.Params["library"])
	if err != nil {
		return nil, err
	}
	b, err := open(lib, opts, spawnProcess)
	if err != nil {
		return nil, err
	}
	b.needFiles = true
	if _, set := opts.Params["switch_overhead"]; !set {
		b.switchAuto = true // the default: measure it
	}
	if b.switchAuto {
		b.calibrate()
	}
	return b, nil
}

// positiveDuration reads an option that is a duration above 0.
func positiveDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err == nil && d <= 0 {
		err = fmt.Errorf("must be positive")
	}
	return d, err
}

// open opens the backend with d, which it uses only to check the device
// and learn its name: workers, started by spawn, drive the GPU.
func open(d driver, opts backend.Options, spawn spawner) (*Backend, error) {
	if opts.Clock != "" && opts.Clock != "wall" {
		return nil, fmt.Errorf("%w: clock %q: a real GPU runs on the wall clock only", backend.ErrInvalid, opts.Clock)
	}
	b := &Backend{
		spawn: spawn, library: opts.Params["library"], gap: DefaultGapNs, stall: int64(DefaultStallCheck),
		restartDelay: DefaultRestartDelay, workerSpin: DefaultWorkerSpin, keepWait: keepWait, adoptWait: adoptWait, vms: map[uint32]*cudaVM{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), ho: newHandoff(),
	}
	if _, both := opts.Params["gap_ns"]; both && opts.Params["gap"] != "" {
		return nil, fmt.Errorf("%w: options gap and gap_ns: the same setting (gap_ns is its old name)", backend.ErrInvalid)
	}
	for k, v := range opts.Params {
		var err error
		switch k {
		case "library":
		case "device":
			b.ordinal, err = strconv.Atoi(v)
			if err == nil && b.ordinal < 0 {
				err = fmt.Errorf("negative")
			}
		case "gap":
			var dur time.Duration
			dur, err = positiveDuration(v)
			b.gap = uint64(dur)
		case "gap_ns":
			b.gap, err = strconv.ParseUint(v, 10, 64)
			if err == nil && b.gap == 0 {
				err = fmt.Errorf("must be positive")
			}
		case "stall_check":
			var dur time.Duration
			dur, err = positiveDuration(v)
			b.stall = int64(dur)
		case "restart_delay":
			b.restartDelay, err = positiveDuration(v)
		case "worker_spin":
			b.workerSpin, err = time.ParseDuration(v)
			if err == nil && b.workerSpin < 0 {
				err = fmt.Errorf("must not be negative")
			}
		case "switch_overhead":
			var f float64
			f, b.switchAuto, err = parseSwitchOverhead(v)
			b.setSwitchOverhead(f)
		default:
			return nil, fmt.Errorf("%w: unknown option %q (have device, library, gap, stall_check, restart_delay, worker_spin, switch_overhead)", backend.ErrInvalid, k)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: option %s=%q: %v", backend.ErrInvalid, k, v, err)
		}
	}
	if err := d.Init(); err != nil {
		return nil, fmt.Errorf("initializing the CUDA driver: %w", err)
	}
	dev, err := d.DeviceGet(b.ordinal)
	if err != nil {
		return nil, fmt.Errorf("getting CUDA device %d: %w", b.ordinal, err)
	}
	if b.name, err = d.DeviceName(dev); err != nil {
		return nil, fmt.Errorf("naming CUDA device %d: %w", b.ordinal, err)
	}
	if b.memory, err = d.DeviceTotalMem(dev); err != nil {
		return nil, fmt.Errorf("sizing CUDA device %d: %w", b.ordinal, err)
	}
	if b.pciBusID, err = d.DevicePCIBusID(dev); err != nil {
		return nil, fmt.Errorf("locating CUDA device %d on the PCI bus: %w", b.ordinal, err)
	}
	b.epoch = time.Now()
	if path := os.Getenv(HopsEnv); path != "" {
		b.hops = newBackendHops(path, b.epoch)
	}
	b.chans.Store(&[]*channel{})
	b.done.Add(2)
	go b.completer()
	go b.deliverer()
	return b, nil
}

// DeviceName is the GPU's name as the driver reports it.
func (b *Backend) DeviceName() string { return b.name }

// DeviceMemory is the GPU's memory in bytes, as the driver reports it.
func (b *Backend) DeviceMemory() int64 { return int64(min(b.memory, math.MaxInt64)) }

// PCIBusID is the GPU's PCI address as the driver writes it
// ("0000:00:06.0"; gpuinv normalises it).
func (b *Backend) PCIBusID() string { return b.pciBusID }

// Clock is monotonic time since Open.
func (b *Backend) Clock() backend.Clock { return wallClock{b.epoch} }

// TimeSlices is true: each VM is a context of its own, between which the
// driver time-slices, preempting a running kernel at the end of its slice
// (compute preemption, every NVIDIA GPU since Pascal).
func (b *Backend) TimeSlices() bool { return true }

type wallClock struct{ epoch time.Time }

func (c wallClock) Now() int64 { return int64(time.Since(c.epoch)) }

func (b *Backend) now() int64 {
	if b.clock != nil {
		return b.clock()
	}
	return int64(time.Since(b.epoch))
}

// Close closes every VM and stops the completer.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("closing the cuda backend: %w", backend.ErrClosed)
	}
	b.closed = true
	vms := make([]*cudaVM, 0, len(b.vms))
	for _, v := range b.vms {
		if v.attached { // not one still starting: its Attach fails
			vms = append(vms, v)
		}
	}
	b.mu.Unlock()
	var first error
	for _, v := range vms {
		if err := v.Close(); err != nil && !errors.Is(err, backend.ErrClosed) && first == nil {
			first = err
		}
	}
	// A VM closed or kept meanwhile by its own caller: the completer
	// delivers its commands until it is done (its finish waits for them).
	for _, v := range vms {
		<-v.finished
	}
	close(b.stop)
	b.done.Wait()
	if b.hops != nil {
		if err := b.hops.write(b.inlined.Load()); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// publishChans rebuilds the channel list from the attached VMs.
func (b *Backend) publishChansLocked() {
	var list []*channel
	for _, v := range b.vms {
		if v.attached {
			list = append(list, v.chans...)
		}
	}
	b.chans.Store(&list)
}

func (b *Backend) wakeup() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// KeepGroundTruth makes the VMs attached after it keep their THROTTLE
// kernels' own records for GroundTruth: what the benchmarks compare bills
// with. A daemon does not call it: a VM's records take up to 96 MiB (24
// bytes a kernel, maxTruthKernels of them), and growing them is work in
// the completer's sweep, whose intervals every VM's bill is made of.
func (b *Backend) KeepGroundTruth() { b.keepTruth.Store(true) }

// GroundTruth is the GPU time a VM's completed THROTTLE kernels measured
// themselves on %globaltimer and how many of them there were; ok is false
// for a VM not attached. It is the union of the kernels' intervals (a VM's
// kernels on several streams run at once and count once), less the time
// the VM's context was switched out (truthLog.total): what the VM occupied
// the GPU for, the benchmarks' ground truth for its bill. It is 0 for a VM
// attached before KeepGroundTruth.
func (b *Backend) GroundTruth(id uint32) (ns, kernels int64, ok bool) {
	b.mu.Lock()
	v := b.vms[id]
	b.mu.Unlock()
	if v == nil {
		return 0, 0, false
	}
	ns, kernels = v.truth.total()
	return ns, kernels, true
}
