package cuda

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"golang.org/x/sys/unix"
)

// cudaVM is one VM on the mediator's side: its shared block, its channels'
// queues, and the GPU worker that owns its context.
type cudaVM struct {
	b        *Backend
	id       uint32
	name     string
	engine   int // its engine in the status (see ReadStatus)
	complete func(backend.Completion)
	chans    []*channel
	attached bool // its first worker runs: its channels are published (b.mu)

	heap   []byte
	heapFD int // our copy of the heap's file; -1 without
	heapAt int64
	sys    []byte // the syscall area; nil without
	// ringHead is the mediator's request ring head (backend.VMSpec.RingHead),
	// nil: 0.
	ringHead func() uint64
	sysFD    int // our copy of its file; -1 without
	sysAt    int64
	memfd    int // the shared block's file, its mapping and layout
	mem      []byte
	blk      block
	efd      int      // the worker's doorbell
	truth    truthLog // its THROTTLE kernels' own records
	// store keeps the running worker's descriptors outside the process
	// (VMSpec.Store, nil: none), for a successor after a crash.
	store backend.DeviceStore

	mu       sync.Mutex // w, closed, tail, the restart state; serializes Submit
	w        *workerConn
	lastErr  error         // why the last worker ended
	lostCode abi.ErrorCode // what commands fail with while there is no worker
	closed   bool
	tail     uint64 // the ring's next entry
	backoff  time.Duration
	timer    *time.Timer // a restart waiting
	starts   sync.WaitGroup

	restarts    atomic.Int64 // workers started after a worker ended
	maxCommand  atomic.Int64 // the longest a command may run, ns; 0: no limit (watchdog.go)
	timeouts    atomic.Int64 // workers the watchdog killed
	closing     atomic.Bool  // Close began: the completer flushes
	undelivered atomic.Int64
	drained     chan struct{} // signalled when undelivered drops to zero
	finished    chan struct{} // closed once finish is done (Close, Keep)

	// credit's count of the VM's channels running at the start and at the
	// end of the interval it splits (the completer's alone).
	creditGen   uint64
	creditChans [2]int
	creditPart  [2]float64 // its bill of each end (credit)
	// Its tracer (tracing.go), the completer's: the count as last read,
	// and whether its block says tracing is on.
	tc      tracerCount
	tracing bool
	// Whether a channel of its was busy (channel.busy) at this sweep and
	// the one before, and whether one had commands queued (the completer's).
	busy, wasBusy     bool
	queued, wasQueued bool
	billKinds         [3]float64      // BillKinds
	dropped           [nDrops]float64 // TracerDropped
}

// workerConn is the mediator's end of one worker.
type workerConn struct {
	p        proc
	sock     int
	born     time.Time
	mu       sync.Mutex // sock against its close
	closed   bool
	err      error       // why it ended; set before dead
	finalEnd []uint64    // each channel's end marker when it ended; set before dead
	dead     atomic.Bool // it ended: its markers are final
	timedOut atomic.Bool // the watchdog killed it (set before the kill)
	exited   chan struct{}
	// store holds the worker's descriptors while stored is set
	// (storeWorker): until it ends, or is handed over.
	store  backend.DeviceStore
	stored atomic.Bool
	// detached is closed when the watch ended on the worker's state,
	// which it asked for to hand the worker over (keep.go): the worker
	// goes on, unwatched; state is its answer.
	detached chan struct{}
	state    *workerState
	nonce    atomic.Uint64 // the query's whose answer detaches it (0: none asked)
}

func newWorkerConn(p proc, sock int) *workerConn {
	return &workerConn{p: p, sock: sock, born: time.Now(), exited: make(chan struct{}), detached: make(chan struct{})}
}

// lostCode is what its commands that did not end fail with once it has
// ended: abi.ErrTimedOut where the watchdog killed it, else abi.ErrDevice.
func (w *workerConn) lostCode() abi.ErrorCode {
	if w.timedOut.Load() {
		return abi.ErrTimedOut
	}
	return abi.ErrDevice
}

// channel is one channel on the mediator's side. Fields below mu are
// guarded by it.
type channel struct {
	vm   *cudaVM
	idx  int
	base uintptr // its block's offset in the shared block
	seq  uint64  // the last command sent to a worker (v.mu)

	mu       sync.Mutex
	q        []item // submitted, not yet delivered, in order (push)
	qbuf     []item // q's backing array
	startSeq uint64 // the command whose start was seen, and when
	startAt  int64
	lastEnd  int64 // when the last command's end was seen

	// The completer's, for one sweep: the markers its peek read, and
	// credit's count of the channel's commands that ran in the interval.
	peekEnd    uint64
	peekStart  uint64
	peekIssued uint64
	busy       bool // a LAUNCH, THROTTLE or MEMSET issued on it had not ended (its offIssued)
	pending    bool // it had commands queued, not yet delivered
	creditGen  uint64
	creditCmds int     // the commands it ran in the interval
	creditEnds [2]bool // running at the interval's start, at its end

	// The hop diagnostic's (backendHops.mu): the last callback's start and
	// the last Submit.
	hopCallback, hopSubmit int64
	// The deliverer's (or the completer's, delivering inline: never both
	// at once): the last THROTTLE completed, its last %globaltimer read
	// and when its end was seen (the kernel_gap hop).
	hopLastSeq                  uint64
	hopLastKernel, hopLastEndAt int64

	// readThrough is the last command whose completion the deliverer
	// took: it reads a command's slots there (takeRecord, the hop
	// diagnostic), so the slots of those after it, delivered by the
	// completer or not, are not free yet (Submit). Seqs are the channel's
	// in order, and so are its deliveries.
	readThrough atomic.Uint64
}

// push queues it behind the commands in flight (ch.mu held). q moves
// forward through its backing array qbuf as the completer drops delivered
// commands from its front; where it reaches qbuf's end, the commands still
// queued move back to qbuf's start if that much of it is free, and to an
// array twice their number if not. So a channel queues without allocating
// once its array fits its depth: appending to a queue cut from the front
// reallocated every few commands at depth 8, garbage the mediator's
// collector then had to keep up with.
func (ch *channel) push(it item) {
	if n := len(ch.q); n == cap(ch.q) {
		if free := cap(ch.qbuf) - n; free < n || free == 0 {
			ch.qbuf = make([]item, 0, max(16, 2*n))
		}
		ch.q = ch.qbuf[:copy(ch.qbuf[:n], ch.q)]
	}
	ch.q = append(ch.q, it)
}

// item is one submitted command.
type item struct {
	seq        uint64      // its markers and slot; 0: it never went to a worker
	w          *workerConn // the worker it went to
	tag        uint64
	op         abi.Opcode
	code       abi.ErrorCode // for seq 0
	submitAt   int64
	startAt    int64   // when its start marker was first seen; 0 if never
	endAt      int64   // when its end marker was first seen (the sweep's instant, never before its start)
	seen       bool    // a sweep saw it running (it is credited as running, not unseen)
	unseenOnce bool    // listed by a sweep as ended unseen (peek): credited in that sweep only
	gpu        float64 // its share of the GPU while it ran (the completer's sweeps)
	ran        float64 // its VM's share of the GPU while it ran: the watchdog's clock
}

// Attach starts the VM's GPU worker, which creates its context, streams
// and throttle kernel and registers the heap and the shared block; with
// spec.Adopt, it adopts the worker a predecessor kept instead (keep.go),
// or fails with backend.ErrBadKept.
func (b *Backend) Attach(spec backend.VMSpec) (backend.VM, error) {
	switch {
	case spec.Channels <= 0 || spec.Channels > abi.MaxChannels:
		return nil, fmt.Errorf("attaching VM %d: %w: %d channels", spec.ID, backend.ErrInvalid, spec.Channels)
	case spec.Complete == nil:
		return nil, fmt.Errorf("attaching VM %d: %w: no Complete callback", spec.ID, backend.ErrInvalid)
	case spec.MaxCommandNs < 0:
		return nil, fmt.Errorf("attaching VM %d: %w: a longest command of %d ns", spec.ID, backend.ErrInvalid, spec.MaxCommandNs)
	case spec.MaxInFlight < 0 || spec.MaxInFlight > abi.MaxRingEntries:
		return nil, fmt.Errorf("attaching VM %d: %w: %d commands in flight", spec.ID, backend.ErrInvalid, spec.MaxInFlight)
	case len(spec.Heap) > 0 && spec.HeapFile == nil && b.needFiles:
		return nil, fmt.Errorf("attaching VM %d: %w: the heap's file is needed to map it into the VM's GPU worker", spec.ID, backend.ErrInvalid)
	case len(spec.Syscalls) > 0 && spec.SyscallFile == nil && b.needFiles:
		return nil, fmt.Errorf("attaching VM %d: %w: the syscall area's file is needed to map it into the VM's GPU worker", spec.ID, backend.ErrInvalid)
	case len(spec.Syscalls) > 0 && spec.SyscallFile != nil && spec.SyscallFile.Offset%int64(unix.Getpagesize()) != 0:
		return nil, fmt.Errorf("attaching VM %d: %w: the syscall area starts at %d in its file, not on a page", spec.ID, backend.ErrInvalid, spec.SyscallFile.Offset)
	}
	inflight := spec.MaxInFlight
	if inflight == 0 {
		inflight = backend.DefaultMaxInFlight
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, fmt.Errorf("attaching VM %d: %w", spec.ID, backend.ErrClosed)
	}
	if _, dup := b.vms[spec.ID]; dup {
		b.mu.Unlock()
		return nil, fmt.Errorf("attaching VM %d: %w: already attached", spec.ID, backend.ErrInvalid)
	}
	b.nextEngine++
	v := &cudaVM{
		b: b, id: spec.ID, name: spec.Name, engine: b.nextEngine, complete: spec.Complete, heap: spec.Heap,
		sys: spec.Syscalls, ringHead: spec.RingHead, heapFD: -1, sysFD: -1, memfd: -1, efd: -1, backoff: b.restartDelay, drained: make(chan struct{}, 1),
		lostCode: abi.ErrDevice, store: spec.Store, finished: make(chan struct{}),
	}
	v.truth.keep.Store(b.keepTruth.Load())
	v.maxCommand.Store(spec.MaxCommandNs)
	b.vms[spec.ID] = v // reserved; its channels are published once it runs
	b.mu.Unlock()
	l := newBlockLayout(spec.Channels, inflight, b.hops != nil)
	var w *workerConn
	err := v.keepFiles(spec)
	switch {
	case err != nil:
	case spec.Adopt != nil:
		w, err = v.adopt(spec, l) // ends the worker itself on failure
	default:
		if err = v.setup(spec, l); err == nil {
			w, err = v.start()
		}
	}
	if err == nil {
		v.storeWorker(w) // before Attach returns: a crash from then on keeps it
	}
	b.mu.Lock()
	if err == nil && b.closed {
		err = backend.ErrClosed
	}
	if err != nil {
		delete(b.vms, spec.ID)
		b.mu.Unlock()
		if w != nil {
			_ = sendMsg(w.sock, message{Kind: msgStop})
			w.discard()
		}
		v.release()
		return nil, fmt.Errorf("attaching VM %d (%s) to %s: %w", spec.ID, spec.Name, b.name, err)
	}
	v.mu.Lock()
	v.w = w
	v.mu.Unlock()
	v.attached = true
	go v.watch(w)
	b.publishChansLocked()
	b.mu.Unlock()
	return v, nil
}

// keepFiles keeps copies of the heap's and the syscall area's files, for
// the VM's workers.
func (v *cudaVM) keepFiles(spec backend.VMSpec) (err error) {
	if spec.HeapFile != nil && len(spec.Heap) > 0 {
		if v.heapFD, err = unix.FcntlInt(uintptr(spec.HeapFile.FD), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			return fmt.Errorf("keeping the heap's file: %w", err)
		}
		v.heapAt = spec.HeapFile.Offset
	}
	if spec.SyscallFile != nil && len(spec.Syscalls) > 0 {
		if v.sysFD, err = unix.FcntlInt(uintptr(spec.SyscallFile.FD), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			return fmt.Errorf("keeping the syscall area's file: %w", err)
		}
		v.sysAt = spec.SyscallFile.Offset
	}
	return nil
}

// setup makes the shared block, the doorbell and the channels.
func (v *cudaVM) setup(spec backend.VMSpec, l blockLayout) (err error) {
	if v.memfd, err = shm.NewMemfd(fmt.Sprintf("sluice-cuda-%d", spec.ID), int64(l.size)); err != nil {
		return fmt.Errorf("creating the shared block: %w", err)
	}
	if v.mem, err = shm.Map(v.memfd, l.size); err != nil {
		return fmt.Errorf("mapping the shared block: %w", err)
	}
	if v.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("creating the worker's doorbell: %w", err)
	}
	v.useBlock(spec, l)
	return nil
}

// useBlock lays the VM's channels and memory quota out on its mapping of
// the shared block.
func (v *cudaVM) useBlock(spec backend.VMSpec, l blockLayout) {
	v.blk = newBlock(l, v.mem)
	v.blk.store(offQuota, spec.MemoryQuota)
	v.blk.store(offTracing, 0) // a predecessor's (adopted) is not this backend's: see tracing.go
	for i := range spec.Channels {
		v.chans = append(v.chans, &channel{vm: v, idx: i, base: v.blk.chanBase(i)})
	}
}

// release frees what setup made.
func (v *cudaVM) release() {
	for _, fd := range []int{v.heapFD, v.sysFD, v.memfd, v.efd} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	v.heapFD, v.sysFD, v.memfd, v.efd = -1, -1, -1, -1
	if v.mem != nil {
		_ = shm.Unmap(v.mem)
		v.mem = nil
	}
}

// startTimeout bounds a worker's start (driver initialization and context
// creation take a fraction of a second).
const startTimeout = 60 * time.Second

// start starts a worker on the shared block and waits until it runs.
func (v *cudaVM) start() (*workerConn, error) {
	v.mu.Lock()
	// Whatever an earlier worker left in the ring is not its to issue, and
	// its buffers went with its context.
	v.blk.store(offHead, v.tail)
	v.blk.store(offSleeping, 0)
	v.blk.store(offMemUsed, 0)
	v.mu.Unlock()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("creating the worker's socket: %w", err)
	}
	b := v.b
	cfg := v.config()
	p, err := b.spawn(cfg, workerFiles{
		sock: sp[1], efd: v.efd, sharedFD: v.memfd, heapFD: v.heapFD, sysFD: v.sysFD,
		shared: v.mem, heapMem: v.heap, sysMem: v.sys,
	})
	if err != nil {
		_ = unix.Close(sp[0])
		return nil, err
	}
	w := newWorkerConn(p, sp[0])
	m, err := w.handshake(cfg)
	if err == nil && m.Kind != msgReady {
		err = m.err()
		if m.Kind != msgError {
			err = fmt.Errorf("the GPU worker answered %q", m.Kind)
		}
	}
	if err != nil {
		w.discard()
		return nil, err
	}
	if b.hops != nil {
		b.hops.workerClock(v.id, m.Clock)
	}
	return w, nil
}

// config is what a worker of the VM is started with.
func (v *cudaVM) config() workerConfig {
	b := v.b
	return workerConfig{
		VM: v.id, Name: v.name, Device: b.ordinal, Library: b.library, GapNs: b.gap, StallNs: b.stall, SpinNs: int64(b.workerSpin),
		Channels: len(v.chans), Slots: v.blk.l.slots, HeapSize: uint64(len(v.heap)), HeapOff: v.heapAt, RingBase: v.ringBase(),
		SharedSize: v.blk.l.size, SyscallSize: uint64(len(v.sys)), SyscallOff: v.sysAt, Hops: b.hops != nil,
	}
}

// discard ends a worker that nothing watches (yet, or any more: stop
// would wait for a watch, and a watch would restart it).
func (w *workerConn) discard() {
	w.p.kill()
	_ = w.p.wait()
	w.unstore()
	_ = unix.Close(w.sock)
}

// storeWorker puts the descriptors a successor adopts worker w by (as
// Keep hands them over: keep.go) in the VM's store, if it has one: a
// successor started after a crash finds it there. The store's copy of its
// socket keeps the worker from seeing the socket close when the mediator
// dies; a store emptied (the service stopped) closes it, and the worker
// ends.
func (v *cudaVM) storeWorker(w *workerConn) {
	if v.store == nil {
		return
	}
	pidfd, err := w.p.pidfd()
	if err == nil {
		w.store = v.store
		err = v.store.StoreKept(backend.Kept{Backend: "cuda", FDs: []int{keptSock: w.sock, keptShared: v.memfd, keptDoorbell: v.efd, keptPidfd: pidfd}})
		unix.Close(pidfd)
	}
	if err != nil {
		// Nothing of it stays: a part stored would name this worker's
		// socket, or an ended one's, to a successor after a crash.
		if rerr := v.store.RemoveKept(backend.Kept{Backend: "cuda", FDs: make([]int, keptFDs)}); rerr != nil {
			err = errors.Join(err, rerr)
		}
		slog.Warn("cuda: a VM's GPU worker is not in the fd store; a crash of the mediator would end it", "vm", v.id, "name", v.name, "err", err)
		return
	}
	w.stored.Store(true)
}

// unstore takes an ended worker's descriptors out of the store.
func (w *workerConn) unstore() {
	if !w.stored.CompareAndSwap(true, false) {
		return
	}
	if err := w.store.RemoveKept(backend.Kept{Backend: "cuda", FDs: make([]int, keptFDs)}); err != nil {
		slog.Warn("cuda: an ended GPU worker stays in the fd store", "err", err)
	}
}

// handshake sends the worker its configuration and reads its answer.
func (w *workerConn) handshake(cfg workerConfig) (message, error) {
	if err := sendMsg(w.sock, message{Kind: msgConfig, Config: &cfg}); err != nil {
		return message{}, fmt.Errorf("configuring the GPU worker: %w", err)
	}
	fds := []unix.PollFd{{Fd: int32(w.sock), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(startTimeout.Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return message{}, fmt.Errorf("waiting for the GPU worker: %w", err)
		}
		if n == 0 {
			return message{}, fmt.Errorf("the GPU worker did not start within %v", startTimeout)
		}
		m, err := readMsg(w.sock)
		if err != nil {
			return message{}, fmt.Errorf("the GPU worker ended while starting: %w", err)
		}
		return m, nil
	}
}

// watch reads the worker's messages until it ends, then lets its VM know;
// or until it answers a query (keep.go), which the mediator asks only to
// hand the worker over: then it leaves the worker be.
func (v *cudaVM) watch(w *workerConn) {
	var why error
	for {
		m, err := readMsg(w.sock)
		if err != nil {
			break
		}
		switch {
		case m.Kind == msgFault:
			why = fmt.Errorf("its context faulted: %w", m.err())
		case m.Kind == msgState && m.State != nil && m.Nonce != 0 && m.Nonce == w.nonce.Load():
			w.state = m.State
			close(w.detached)
			return
		}
	}
	st := w.p.wait()
	if w.timedOut.Load() {
		why = fmt.Errorf("%w: a command ran on the GPU past the VM's limit of %v", errWatchdog, time.Duration(v.maxCommand.Load()))
	}
	// Its markers as it left them: a later worker's markers go on from
	// there and must not end this one's commands.
	w.finalEnd = make([]uint64, len(v.chans))
	for i, ch := range v.chans {
		w.finalEnd[i] = v.blk.load(ch.base + offEnd)
	}
	if why == nil {
		why = fmt.Errorf("the GPU worker ended: %v", st)
		if st == nil {
			why = errors.New("the GPU worker ended")
		}
	}
	w.mu.Lock()
	w.closed = true
	_ = unix.Close(w.sock)
	w.mu.Unlock()
	w.unstore() // before a worker that replaces it is stored
	w.err = why
	w.dead.Store(true)
	close(w.exited)
	v.b.wakeup()
	v.ended(w)
}

// stopTimeout is how long a worker told to stop has before it is killed.
const stopTimeout = 5 * time.Second

// stop ends the worker and waits until it has.
func (w *workerConn) stop() {
	w.mu.Lock()
	if !w.closed {
		_ = sendMsg(w.sock, message{Kind: msgStop})
	}
	w.mu.Unlock()
	select {
	case <-w.exited:
		return
	case <-w.detached: // a hand-over that failed after the worker answered
		w.discard()
		return
	case <-time.After(stopTimeout):
	}
	w.p.kill()
	select {
	case <-w.exited:
	case <-w.detached:
		w.discard()
	}
}

// Restarts after a worker ended: restartDelay, doubled while workers keep
// ending young, up to maxRestartDelay.
const maxRestartDelay = time.Minute

// ended handles a worker's end: unless the VM is closing, a new worker
// starts after the backoff. The VM's commands fail with abi.ErrDevice until
// it runs; then they run in a fresh context, where the handles of before
// are gone.
func (v *cudaVM) ended(w *workerConn) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.w == w {
		v.w = nil
	}
	v.lastErr = w.err
	v.lostCode = w.lostCode()
	if v.closed {
		return
	}
	if time.Since(w.born) < 10*v.backoff {
		v.backoff = min(2*v.backoff, maxRestartDelay)
	} else {
		v.backoff = v.b.restartDelay
	}
	slog.Warn("cuda: a VM's GPU worker ended; restarting it", "vm", v.id, "name", v.name, "err", w.err, "in", v.backoff)
	v.scheduleLocked(v.backoff)
}

func (v *cudaVM) scheduleLocked(d time.Duration) {
	v.starts.Add(1)
	v.timer = time.AfterFunc(d, v.restart)
}

func (v *cudaVM) restart() {
	defer v.starts.Done()
	w, err := v.start()
	v.mu.Lock()
	v.timer = nil
	closed := v.closed
	switch {
	case closed:
	case err != nil:
		slog.Error("cuda: restarting a VM's GPU worker", "vm", v.id, "name", v.name, "err", err)
		v.lastErr = fmt.Errorf("restarting its GPU worker: %w", err)
		v.lostCode = abi.ErrDevice
		v.backoff = min(2*v.backoff, maxRestartDelay)
		v.scheduleLocked(v.backoff)
	default:
		v.storeWorker(w)
		v.w = w
		v.restarts.Add(1)
	}
	v.mu.Unlock()
	if w != nil {
		go v.watch(w)
		if closed {
			w.stop() // before Close frees what the worker uses
		}
	}
}

// Submit sends cmd to the VM's worker on its channel, or completes it in
// its place while the VM has no worker: with abi.ErrTimedOut where the
// watchdog killed the last one, else abi.ErrDevice.
func (v *cudaVM) Submit(channel int, cmd abi.Command, tag uint64) error {
	if channel < 0 || channel >= len(v.chans) {
		return fmt.Errorf("submitting to channel %d of VM %d: %w: it has %d", channel, v.id, backend.ErrInvalid, len(v.chans))
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return fmt.Errorf("submitting to VM %d: %w", v.id, backend.ErrClosed)
	}
	ch := v.chans[channel]
	// One hold of ch.mu: the completer sees the command queued by the time
	// its end marker can be there.
	ch.mu.Lock()
	if n := max(len(ch.q), int(ch.seq-ch.readThrough.Load())); n >= v.blk.l.slots {
		ch.mu.Unlock()
		return fmt.Errorf("submitting to channel %d of VM %d: %w: %d commands in flight, the most it was attached with", channel, v.id, backend.ErrInvalid, n)
	}
	// Counted before the worker or the completer can see it: counted after,
	// the completer could deliver it first, read one command too few
	// outstanding and rest (dropping a running command's credit) or park
	// while another still runs.
	v.undelivered.Add(1)
	v.b.outstanding.Add(1)
	it := item{tag: tag, op: cmd.Op, submitAt: v.b.now()}
	ring := false
	if w := v.w; w == nil {
		it.code = v.lostCode
	} else if w.dead.Load() {
		it.code = w.lostCode()
	} else {
		ch.seq++
		it.seq, it.w = ch.seq, w
		rec := abi.EncodeCommand(cmd)
		v.blk.putEntry(v.tail, channel, it.seq, &rec)
		v.tail++
		ring = v.blk.load(offSleeping) != 0
	}
	ch.push(it)
	if h := v.b.hops; h != nil {
		h.submitted(ch, it.submitAt)
	}
	ch.mu.Unlock()
	if ring { // the worker sleeps: its doorbell (a system call, outside ch.mu)
		var one [8]byte
		le.PutUint64(one[:], 1)
		_, _ = unix.Write(v.efd, one[:])
	}
	if v.b.parked.Load() { // a busy completer sees outstanding: no channel operation for it
		v.b.wakeup()
	}
	return nil
}

var _ backend.MemoryQuota = (*cudaVM)(nil)

// SetMemoryQuota sets the VM's device memory quota (0: none but the GPU's),
// which its worker reads at every ALLOC. After Close it does nothing.
func (v *cudaVM) SetMemoryQuota(bytes uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.closed {
		v.blk.store(offQuota, bytes)
	}
}

// MemoryUsed is the device memory the VM's buffers, modules and local
// memory hold, as its worker counts it (0 while it has none, and after
// Close).
func (v *cudaVM) MemoryUsed() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return 0
	}
	return v.blk.load(offMemUsed)
}

// Fault is why the VM's last worker ended, while it has none running, or
// nil.
func (v *cudaVM) Fault() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.w != nil && !v.w.dead.Load() {
		return nil
	}
	if v.w != nil {
		return v.w.err
	}
	return v.lastErr
}

// Restarts is how many workers the VM has started after one ended.
func (v *cudaVM) Restarts() int64 { return v.restarts.Load() }

// Close completes the VM's outstanding commands (those whose end marker was
// written normally, the rest with abi.ErrShutdown), ends its worker (which
// ends its context and frees its device memory) and frees the shared block.
// It must not be called from a Complete callback.
func (v *cudaVM) Close() error {
	w, err := v.shut()
	if err != nil {
		return fmt.Errorf("closing VM %d: %w", v.id, err)
	}
	v.finish(w)
	return nil
}

// shut marks the VM closed: Submit refuses, and no worker starts any more.
// w is its worker, nil when none runs.
func (v *cudaVM) shut() (w *workerConn, err error) {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return nil, backend.ErrClosed
	}
	v.closed = true
	w = v.w
	v.w = nil
	if v.timer != nil && v.timer.Stop() {
		v.timer = nil
		v.starts.Done()
	}
	v.mu.Unlock()
	v.starts.Wait() // a restart under way ends its worker itself
	return w, nil
}

// finish ends a VM that shut: it completes the outstanding commands
// (those whose end marker was written normally, the rest with
// abi.ErrShutdown), ends w (nil: none) and frees the shared block.
func (v *cudaVM) finish(w *workerConn) {
	v.closing.Store(true)
	b := v.b
	b.wakeup()
	for v.undelivered.Load() != 0 {
		<-v.drained
	}
	b.mu.Lock()
	delete(b.vms, v.id)
	b.publishChansLocked()
	b.mu.Unlock()
	// Nobody reads the shared block once a sweep that began before the
	// removal has ended.
	b.sweeping.Lock()
	//lint:ignore SA2001 a barrier: it waits out sweeps that began before the removal
	b.sweeping.Unlock()
	if w != nil {
		w.stop()
	}
	v.release()
	close(v.finished)
}

// ringBase is where a new worker's request ring claim counter starts.
func (v *cudaVM) ringBase() uint64 {
	if v.ringHead == nil {
		return 0
	}
	return v.ringHead()
}
