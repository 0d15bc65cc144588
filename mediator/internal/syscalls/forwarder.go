package syscalls

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
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
	// Memfd, when not nil, is where Area is in a file the proxy can map:
	// the forwarder hands it to each proxy it starts, which then writes
	// results into the slots itself (one hop less per call). Nil: the
	// forwarder writes them.
	Memfd *Memfd
	Start Starter
	// GPUNs is the VM's accounted GPU time, handed to getrusage.
	GPUNs func() uint64
	// MaxFileSize is the VM's file size limit in bytes (0: none): the
	// proxy's RLIMIT_FSIZE, which fastcall writes, run here, obey too.
	MaxFileSize uint64
	Log         *slog.Logger // nil: slog.Default()
	// RingHead is the request ring's position to read from: 0 for a new
	// area, or the RingHead of the forwarder that served the area before,
	// closed (a hand-over to a successor sluiced).
	RingHead uint64
	// HeadStore, when not nil, is where the poller stores the request
	// ring's head as it takes each entry, before it serves the call: a
	// word in a file that outlives the process (the VM's fd store), from
	// which a successor after a crash reads on (Orphans answers what the
	// crashed one took). A plain store: no other goroutine reads it.
	HeadStore *uint64
	// Answered are the calls Orphans answered before this forwarder
	// started (after a crash): a ring entry that names one, written by a
	// caller stalled past Orphans' grace, is consumed and never served.
	Answered []SlotCall
}

// Memfd is a descriptor and the offset of the syscall area in it. The
// forwarder does not own FD: it must stay open while the forwarder runs.
type Memfd struct {
	FD  int
	Off uint64
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
	inflight []held           // per slot: the blocking call with the proxy, if any
	nIn      int
	// shadow is, per request ring position (masked), the blocking call
	// published there: what a Bulk record's positions stand for.
	shadow     []shadowEntry
	shadowMask uint64
	closed     bool

	// orphanSweep asks the poller for failOrphansLocked at its next pass:
	// a proxy is gone.
	orphanSweep atomic.Bool

	t0 time.Time // the clock the poller's times count from

	// The poller's own: whether it scans the ready map (readymap.go); the
	// sweep of every state word in progress (the next slot, -1: none) and
	// when the last one started (ns since t0); the pass's start, which
	// stamps what the pass takes; the counts it flushes into stats at the
	// end of each pass; scratch for the hinted slots and their states.
	readyMap   bool
	hints      []uint64 // the ready map's words (readymap.go)
	nullHere   bool     // a diagnostic: null calls answered by the poller (diag.go)
	sweepAt    int
	lastSweep  int64
	passAt     int64
	tally      tally
	cand       []uint32
	states     []uint32
	reqRing    *ringReader   // the request ring, read from its head (sysring.go)
	answered   answeredCalls // Spec.Answered, until their entries come (the poller's)
	ringStored uint64        // reqRing's head as last stored in ringPublished
	// ringPublished is reqRing's head for other goroutines (RingHead).
	ringPublished atomic.Uint64

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
		inflight: make([]held, spec.Slots),
		t0:       time.Now(),
		readyMap: os.Getenv("SLUICE_SYSCALL_READY_MAP") != "off",
		nullHere: os.Getenv(NullHereEnv) == "1",
		sweepAt:  -1,
		cand:     make([]uint32, 0, spec.Slots),
		states:   make([]uint32, spec.Slots),
	}
	if f.log == nil {
		f.log = slog.Default()
	}
	f.hints = spec.Area.Words64(abi.SyscallReadyMapOff, uint64(spec.Slots+7)/8)
	f.reqRing = newRingReader(spec.Area, spec.Slots, spec.RingHead)
	f.answered = newAnsweredCalls(spec.Answered)
	f.ringStored = spec.RingHead
	f.ringPublished.Store(spec.RingHead)
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
		// The receiver's shutdown may have closed the connection
		// already: that is no failure to stop the proxy.
		if err = p.Close(); errors.Is(err, net.ErrClosed) {
			err = nil
		}
	}
	f.wg.Wait()
	f.mu.Lock()
	f.failOrphansLocked() // nobody answers them now: the GPU must not wait on
	f.mu.Unlock()
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

// drainLocked consumes the result ring. A result the proxy wrote into its
// slot itself (ByProxy) ends the call's tracking; one it could not write
// (Refused: the guest took the slot back) counts as lost; any other whose
// slot still waits for exactly that call is written back here. Anything
// else (a non-blocking call's result, a stale one, or whatever a hostile
// proxy wrote) is dropped. It reads at most one ring's worth, so a proxy
// that keeps republishing cannot hold it, and frees the records it read
// with one store. It returns how many records it consumed.
func (f *Forwarder) drainLocked() int {
	rg := f.ring
	if rg == nil {
		return 0
	}
	n := 0
	var (
		now int64 // read once, when a result came
		d   done  // the proxy's completions, counted once
	)
	for max := rg.ResultCap(); n < max; n++ {
		r, ok := rg.MediatorNextResult(f.resHead)
		if !ok {
			break
		}
		if now == 0 {
			now = f.now()
		}
		f.resHead++
		switch r.Delivery {
		case proxyproto.ByProxy:
			d.add(f, r.Slot, r.Seq, r.Errno, now)
		case proxyproto.Bulk:
			for m := r.Mask; m != 0; m &= m - 1 {
				pos := r.Pos + uint64(bits.TrailingZeros64(m))
				if e := f.shadow[pos&f.shadowMask]; e.pos1 == pos+1 {
					d.add(f, e.slot, e.seq, 0, now)
				}
			}
		case proxyproto.Refused:
			if _, ok := f.claimLocked(r.Slot, r.Seq); ok {
				f.stats.errno(r.Errno)
				f.stats.lost.Add(1)
			}
		default:
			if seen, ok := f.claimLocked(r.Slot, r.Seq); ok {
				f.finish(r.Slot, r.Seq, r.Ret, r.Errno, seen, now)
			}
		}
	}
	if n > 0 {
		rg.MediatorConsumed(f.resHead)
		d.flush(&f.stats)
		f.stats.activity.Store(true) // their callers come back: keep spinning
	}
	return n
}

// shadowEntry is a request ring position's blocking call: the position + 1
// (0: none), the slot and its sequence number.
type shadowEntry struct {
	pos1      uint64
	slot, seq uint32
}

// done counts, over one drain, the calls the proxy completed in their
// slots: the stats then take a few atomic adds per drain, not per call.
type done struct {
	ok, served    uint64
	svcNs, svcMax int64
}

// add ends the tracking of a call the proxy completed. A claim that fails
// (the slot's next call was taken before this record was read, or the
// record is a hostile proxy's) still counts the result, without a time.
func (d *done) add(f *Forwarder, slot, seq uint32, errno abi.Errno, now int64) {
	if errno == 0 {
		d.ok++
	} else {
		f.stats.errno(errno)
	}
	if seen, ok := f.claimLocked(slot, seq); ok {
		t := max(now-seen, 0)
		d.served++
		d.svcNs += t
		d.svcMax = max(d.svcMax, t)
	}
}

func (d *done) flush(s *stats) {
	if d.ok > 0 {
		s.small[0].Add(d.ok)
	}
	if d.served > 0 {
		s.served.Add(d.served)
		s.serviceNs.Add(d.svcNs)
		s.maxService(d.svcMax)
	}
}

// finish writes a blocking call's result and hands the slot back; seen
// (when the scan took it) and now (ns since t0) time the call's service.
func (f *Forwarder) finish(slot, seq uint32, ret int64, errno abi.Errno, seen, now int64) {
	f.stats.errno(errno)
	if !proxyproto.CompleteSlot(f.spec.Area, slot, seq, ret, errno) {
		// The guest took the slot back: its bytes were not ours to write.
		f.stats.lost.Add(1)
		return
	}
	d := max(now-seen, 0)
	f.stats.served.Add(1)
	f.stats.serviceNs.Add(d)
	f.stats.maxService(d)
}

// now is the time since t0 in ns, at least 1.
func (f *Forwarder) now() int64 { return max(1, int64(time.Since(f.t0))) }
