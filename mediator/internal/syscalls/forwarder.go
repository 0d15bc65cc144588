package syscalls

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// Proxy is a running proxy process, as the forwarder needs it.
type Proxy interface {
	// Conn is the forwarder's end of the proxy's SOCK_SEQPACKET socket.
	Conn() *net.UnixConn
	// CPUTime is the CPU the process has used (user + system).
	CPUTime() time.Duration
	// Pid is the process id on the host.
	Pid() int
	// Close ends the process and reaps it.
	Close() error
}

// Starter starts a fresh proxy for the VM.
type Starter func() (Proxy, error)

// Spec describes one VM to a Forwarder.
type Spec struct {
	Name  string
	Area  *shm.Region // the VM's syscall area: the bitmap page, then the slots
	Slots int         // slots in Area (abi.Layout.SyscallSlots)
	Heap  []byte      // the VM's heap, for fastcalls
	Start Starter
	// GPUNs is the VM's accounted GPU time, handed to getrusage.
	GPUNs func() uint64
	Log   *slog.Logger // nil: slog.Default()
}

// Forwarder serves one VM's syscall area.
type Forwarder struct {
	spec  Spec
	cfg   atomic.Pointer[Config]
	kick  chan struct{}
	stop  chan struct{}
	wg    sync.WaitGroup
	log   *slog.Logger
	stats stats

	// ringMu is held (read) by the poller while it writes requests into
	// the running proxy's rings; runProxy unmaps them under the write lock.
	ringMu sync.RWMutex

	mu       sync.Mutex
	proxy    Proxy
	sock     *sock            // the running proxy's socket
	ring     *proxyproto.Ring // the running proxy's rings
	resHead  uint64           // the result ring's consumer index (ours alone)
	state    string           // "starting", "running", or why the proxy is down
	inflight []uint32         // per slot: seq+1 while a blocking call is with the proxy
	nIn      int
	closed   bool

	t0     time.Time      // the clock seenAt counts from
	seenAt []atomic.Int64 // per slot: ns since t0 when the scan took its blocking call (0: none)

	// The poller's own: whether it scans the ready map (readymap.go); the
	// sweep of every state word in progress (the next slot, -1: none) and
	// when the last one started (ns since t0); the pass's start, which
	// stamps what the pass takes; the counts it flushes into stats at the
	// end of each pass; scratch for the hinted slots and their states.
	readyMap  bool
	sweepAt   int
	lastSweep int64
	passAt    int64
	tally     tally
	cand      []uint32
	states    []uint32

	fastMu sync.RWMutex // guards fast; held (read) across a fastcall's I/O
	fast   fastTable
}

// ErrClosed is returned by a closed Forwarder.
var ErrClosed = errors.New("syscall forwarder closed")

// New starts serving spec's area with cfg.
func New(spec Spec, cfg Config) (*Forwarder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if spec.Slots <= 0 || spec.Area == nil || uint64(spec.Area.Len()) < abi.SyscallAreaSize(spec.Slots) {
		return nil, fmt.Errorf("syscall forwarder for vm %q: area of %d bytes for %d slots", spec.Name, areaLen(spec.Area), spec.Slots)
	}
	if spec.Start == nil || spec.GPUNs == nil {
		return nil, fmt.Errorf("syscall forwarder for vm %q: no proxy starter or GPU time source", spec.Name)
	}
	f := &Forwarder{
		spec:     spec,
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		log:      spec.Log,
		state:    "starting",
		inflight: make([]uint32, spec.Slots),
		t0:       time.Now(),
		seenAt:   make([]atomic.Int64, spec.Slots),
		readyMap: os.Getenv("SLUICE_SYSCALL_READY_MAP") != "off",
		sweepAt:  -1,
		cand:     make([]uint32, 0, spec.Slots),
		states:   make([]uint32, spec.Slots),
	}
	if f.log == nil {
		f.log = slog.Default()
	}
	f.log = f.log.With("vm", spec.Name)
	f.cfg.Store(&cfg)
	f.stats.init()
	f.tally.byCall = make([]uint64, len(f.stats.byCall))
	f.wg.Add(2)
	go f.supervise()
	go f.poll()
	return f, nil
}

func areaLen(r *shm.Region) int {
	if r == nil {
		return 0
	}
	return r.Len()
}

// Kick wakes the poller (the VM's syscall doorbell rang): it scans at once
// and spins for Config.Spin.
func (f *Forwarder) Kick() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Config returns the current tuning.
func (f *Forwarder) Config() Config { return *f.cfg.Load() }

// SetConfig changes the tuning at run time; the next batch uses it.
func (f *Forwarder) SetConfig(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	f.cfg.Store(&c)
	f.Kick()
	return nil
}

// Close stops serving, ends the proxy and fails the calls it held with EIO.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	p, s := f.proxy, f.sock
	f.mu.Unlock()
	close(f.stop)
	var err error
	if s != nil {
		s.shutdown() // ends the receiver, which fails what the proxy held
	}
	if p != nil {
		err = p.Close()
	}
	f.wg.Wait()
	f.fastMu.Lock()
	f.fast.closeAll()
	f.fastMu.Unlock()
	if err != nil {
		return fmt.Errorf("stopping the proxy of vm %q: %w", f.spec.Name, err)
	}
	return nil
}

// drain is drainLocked under the lock.
func (f *Forwarder) drain() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.drainLocked()
}

// drainLocked consumes the result ring: each result whose slot still waits
// for exactly that call is written back; anything else (a non-blocking
// call's result, a stale one, or whatever a hostile proxy wrote) is dropped.
// It reads at most one ring's worth, so a proxy that keeps republishing
// cannot hold it. It returns how many records it consumed.
func (f *Forwarder) drainLocked() int {
	rg := f.ring
	if rg == nil {
		return 0
	}
	n := 0
	var now int64 // read once, when a result came
	for max := rg.ResultCap(); n < max; n++ {
		r, ok := rg.MediatorNextResult(f.resHead)
		if !ok {
			break
		}
		if now == 0 {
			now = f.now()
		}
		f.resHead++
		if f.claimLocked(r.Slot, r.Seq) {
			f.finish(r.Slot, r.Seq, r.Ret, r.Errno, now)
		}
	}
	if n > 0 {
		rg.MediatorConsumed(f.resHead)
		f.stats.activity.Store(true) // their callers come back: keep spinning
	}
	return n
}

// finish writes a blocking call's result and hands the slot back; now
// (ns since t0) ends the call's service time.
func (f *Forwarder) finish(slot, seq uint32, ret int64, errno abi.Errno, now int64) {
	f.stats.errno(errno)
	if !complete(f.spec.Area, slot, seq, ret, errno) {
		// The guest took the slot back: its bytes were not ours to write.
		f.stats.lost.Add(1)
		f.seenAt[slot].Store(0)
		return
	}
	if seen := f.seenAt[slot].Swap(0); seen != 0 {
		d := max(now-seen, 0)
		f.stats.served.Add(1)
		f.stats.serviceNs.Add(d)
		for m := f.stats.serviceMax.Load(); d > m && !f.stats.serviceMax.CompareAndSwap(m, d); m = f.stats.serviceMax.Load() {
		}
	}
}

// completeTries bounds complete's compare-and-swap against a guest that
// keeps rewriting its slot's first word.
const completeTries = 8

// complete writes a taken call's result into its slot and turns it from
// PROCESSING|seq to FINISHED|seq with the errno beside the state word
// (FeatureResultWord), in one 8-byte compare-and-swap; false if the guest
// rewrote the state. The result is written only while the state is
// PROCESSING|seq.
func complete(area *shm.Region, slot, seq uint32, ret int64, errno abi.Errno) bool {
	base := abi.SlotOff(slot)
	processing := abi.SlotWord(abi.SlotProcessing, seq)
	w := area.Load64(base + abi.SysState)
	if uint32(w) != processing {
		return false
	}
	area.Store64(base+abi.SysRet, uint64(ret))
	area.Store64(base+abi.SysErrno, uint64(errno))
	fin := uint64(abi.SlotWord(abi.SlotFinished, seq)) | uint64(uint32(errno))<<32
	for range completeTries {
		if area.CompareAndSwap64(base+abi.SysState, w, fin) {
			return true
		}
		if w = area.Load64(base + abi.SysState); uint32(w) != processing {
			return false
		}
	}
	return false
}

// now is the time since t0 in ns, at least 1.
func (f *Forwarder) now() int64 { return max(1, int64(time.Since(f.t0))) }
