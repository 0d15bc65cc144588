package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"time"
	"unsafe"

	"github.com/sluice-gpu/sluice/api/abi"
	"golang.org/x/sys/unix"
)

// workerConfig is what a GPU worker is told when it starts (the first
// message on its socket).
type workerConfig struct {
	VM         uint32 `json:"vm"`
	Name       string `json:"name"`
	Device     int    `json:"device"`
	Library    string `json:"library,omitempty"`
	GapNs      uint64 `json:"gap_ns"`
	StallNs    int64  `json:"stall_ns"`
	SpinNs     int64  `json:"spin_ns"` // how long to look at an empty ring before sleeping
	Channels   int    `json:"channels"`
	Slots      int    `json:"slots"`
	HeapSize   uint64 `json:"heap_size"`
	HeapOff    int64  `json:"heap_off"` // in the heap file
	SharedSize int    `json:"shared_size"`
	// The syscall area (ABI 1.1): its size (0 without one) and where it
	// starts in its file (page aligned).
	SyscallSize uint64 `json:"syscall_size,omitempty"`
	SyscallOff  int64  `json:"syscall_off,omitempty"`
	// RingBase is where the request ring's claim counter starts: the
	// mediator's head when the worker starts (a restarted worker goes on
	// where the mediator reads).
	RingBase uint64 `json:"ring_base,omitempty"`
	// Hops: the hop diagnostic runs (hops.go): the block has a trace area,
	// and the worker relates the GPU's clock to the host's at its start.
	Hops bool `json:"hops,omitempty"`
}

func (c workerConfig) layout() blockLayout { return newBlockLayout(c.Channels, c.Slots, c.Hops) }

// worker is one VM's GPU worker: the process (a goroutine in the tests) that
// owns the VM's CUDA context. It takes commands from the shared block's ring,
// puts them on the channels' streams between markers, and leaves each one's
// code in its slot. A kernel that faults poisons every context of its
// process, so the worker reports the fault and ends: the mediator and the
// other VMs' workers go on.
type worker struct {
	d     driver
	cfg   workerConfig
	blk   block
	heap  []byte
	sys   []byte // the syscall area; nil without one
	sock  int    // messages to and from the mediator
	efd   int    // the mediator's doorbell: the ring has work
	lim   abi.Layout
	chans []*wchan

	device    string
	ctx       cuContext
	throttle  cuFunction
	sharedDev devptr // the shared block's GPU area's device address
	heapDev   devptr // the registered heap's; 0 without a heap
	sysDev    devptr // the registered syscall area's; 0 without one
	ringDev   devptr // the request ring's claim counter (device memory); 0 without a syscall area

	// The hop diagnostic's (cfg.Hops): the host clock's relation to
	// CLOCK_MONOTONIC and the GPU clock's, sent with the ready message.
	mono  monoClock
	clock *GPUClock

	targs [throttleArgsSize]byte // a THROTTLE's parameters (launchThrottle)

	// The tracer (tracing.go): its kernel (0: it did not load, and the VM
	// runs without), its stream, how many this worker and those before it
	// launched, and its parameters.
	tracer      cuFunction
	traceStream cuStream
	tracers     uint64
	traceQueued int // tracers launched since the stream was last seen idle
	tracerArgs  [tracerArgsSize]byte

	bufs    map[uint32]buffer
	memUsed uint64 // bytes of bufs, mods and local memory, published at offMemUsed
	mods    map[uint32]*module
	// The context's local memory (ops.go, localGrowth): the driver holds
	// local bytes for each of resident threads, the most any kernel
	// launched in the context used (at least the stack), and keeps it.
	resident uint64
	local    uint64
	devMem   uint64 // the device's memory: no charge is ever larger

	// files names the heap's and the syscall area's files a worker
	// process mapped (nil: none), for a successor that adopts it.
	files [2]*fileID
}

type buffer struct {
	ptr  devptr
	size uint64
}

type module struct {
	m     cuModule
	funcs map[string]kernel
}

// kernel is a module's function the VM launched, and the local memory one
// of its threads uses.
type kernel struct {
	f     cuFunction
	local uint64
}

// wchan is a channel on the worker's side.
type wchan struct {
	idx    int
	stream cuStream
	base   uintptr // its block's offset in the shared block
	dev    devptr  // its block's device address
	last   uint64  // the last command issued
	// The fault check: the end marker last seen and since when.
	seenEnd   uint64
	quietFrom int64
}

// errWorkerStop is the mediator's "close": the worker ends without a fault.
var errWorkerStop = errors.New("told to stop")

// faultError is a fault of the worker's context: the VM's GPU work is over
// and the worker ends.
type faultError struct{ err error }

func (e faultError) Error() string { return e.err.Error() }
func (e faultError) Unwrap() error { return e.err }

func newWorker(d driver, cfg workerConfig, shared, heap []byte, sock, efd int) *worker {
	return &worker{
		d: d, cfg: cfg, blk: newBlock(cfg.layout(), shared), heap: heap, sock: sock, efd: efd,
		lim:  abi.Layout{HeapSize: uint64(len(heap))},
		bufs: map[uint32]buffer{}, mods: map[uint32]*module{},
	}
}

// withSyscalls gives the worker the VM's syscall area (nil: none), which it
// registers with the GPU like the heap: the VM's kernels write its slots
// (LAUNCH relocations of kind abi.RelocSyscall) and the mediator's
// forwarder serves them.
func (w *worker) withSyscalls(sys []byte) *worker {
	w.sys = sys
	return w
}

// serve runs the worker to its end. The calling goroutine must be locked to
// its OS thread (the driver keeps the current context per thread). It
// reports its start (ready or error) and a fault to the mediator.
func (w *worker) serve() error {
	d, sock := w.d, w.sock
	if err := w.create(); err != nil {
		_ = sendMsg(sock, errorMsg(msgError, err))
		return err
	}
	if err := sendMsg(sock, message{Kind: msgReady, Device: w.device, Clock: w.clock}); err != nil {
		return fmt.Errorf("telling the mediator the worker is ready: %w", err)
	}
	err := w.run()
	if errors.Is(err, errWorkerStop) {
		// Everything made in the context goes with it (a process that ends
		// would free it anyway).
		_ = d.CtxDestroy(w.ctx)
	}
	var f faultError
	if errors.As(err, &f) {
		_ = sendMsg(sock, errorMsg(msgFault, f.err))
	}
	return err
}

// create makes the context and everything in it; on failure it destroys
// what it made.
func (w *worker) create() (err error) {
	d := w.d
	if err = d.Init(); err != nil {
		return fmt.Errorf("initializing the CUDA driver: %w", err)
	}
	dev, err := d.DeviceGet(w.cfg.Device)
	if err != nil {
		return fmt.Errorf("getting CUDA device %d: %w", w.cfg.Device, err)
	}
	if w.device, err = d.DeviceName(dev); err != nil {
		return fmt.Errorf("naming CUDA device %d: %w", w.cfg.Device, err)
	}
	// CtxCreate makes the new context current on this (locked) thread.
	if w.ctx, err = d.CtxCreate(dev); err != nil {
		return fmt.Errorf("creating a context: %w", err)
	}
	defer func() {
		if err != nil {
			_ = d.CtxDestroy(w.ctx) // frees everything made in it
		}
	}()
	if err = d.CtxSetCurrent(w.ctx); err != nil {
		return fmt.Errorf("making the context current: %w", err)
	}
	var sms, perSM int32
	if sms, err = d.DeviceAttribute(dev, attrSMs); err == nil {
		perSM, err = d.DeviceAttribute(dev, attrThreadsPerSM)
	}
	if err != nil {
		return fmt.Errorf("reading the device's threads: %w", err)
	}
	w.resident = uint64(max(sms, 0)) * uint64(max(perSM, 0))
	if w.devMem, err = d.DeviceTotalMem(dev); err != nil {
		return fmt.Errorf("sizing the device: %w", err)
	}
	if w.local, err = d.CtxStackSize(); err != nil {
		return fmt.Errorf("reading the context's stack size: %w", err)
	}
	var tmod cuModule // freed with the context
	if tmod, err = d.ModuleLoadData(append([]byte(throttlePTX), 0)); err != nil {
		return fmt.Errorf("loading the throttle kernel: %w", err)
	}
	if w.throttle, err = d.ModuleGetFunction(tmod, throttleName); err != nil {
		return fmt.Errorf("finding the throttle kernel: %w", err)
	}
	// Only the GPU area: the ring and the codes stay out of the VM's reach.
	gpu, size := unsafe.Add(w.blk.base, w.blk.l.gpuOff), uint64(w.blk.l.size)-uint64(w.blk.l.gpuOff)
	if err = d.MemHostRegister(gpu, size); err != nil {
		return fmt.Errorf("registering the shared block's %d-byte GPU area: %w", size, err)
	}
	if w.sharedDev, err = d.MemHostGetDevicePointer(gpu); err != nil {
		return fmt.Errorf("mapping the shared block's GPU area: %w", err)
	}
	if len(w.heap) > 0 {
		p := unsafe.Pointer(&w.heap[0])
		if err = d.MemHostRegister(p, uint64(len(w.heap))); err != nil {
			return fmt.Errorf("registering the %d-byte heap for DMA: %w", len(w.heap), err)
		}
		if w.heapDev, err = d.MemHostGetDevicePointer(p); err != nil {
			return fmt.Errorf("mapping the heap: %w", err)
		}
	}
	if len(w.sys) > 0 {
		// Kernels poll its slots with system-scope loads and claim them
		// with atomics on this mapping; the forwarder sees their stores in
		// the same pages (the memfd the guest and the mediator map).
		p := unsafe.Pointer(&w.sys[0])
		if err = d.MemHostRegister(p, uint64(len(w.sys))); err != nil {
			return fmt.Errorf("registering the %d-byte syscall area: %w", len(w.sys), err)
		}
		if w.sysDev, err = d.MemHostGetDevicePointer(p); err != nil {
			return fmt.Errorf("mapping the syscall area: %w", err)
		}
	}
	for i := range w.cfg.Channels {
		s, err := d.StreamCreate()
		if err != nil {
			return fmt.Errorf("creating the stream of channel %d: %w", i, err)
		}
		base := w.blk.chanBase(i)
		// Markers already there (a worker before this one) stay: seq goes
		// on. What that worker issued and never ended stays issued in the
		// block: a tracer would wait for it forever.
		end := w.blk.load(base + offEnd)
		w.blk.store(base+offIssued, end)
		dev := w.sharedDev + devptr(base-w.blk.l.gpuOff)
		w.chans = append(w.chans, &wchan{idx: i, stream: s, base: base, dev: dev, last: end, seenEnd: end})
	}
	if len(w.chans) > 0 {
		if err := w.loadTracer(); err != nil {
			// Billing falls back on the even split of overlaps; the VM runs.
			w.tracer = 0
			fmt.Fprintf(os.Stderr, "sluice-gpu-worker [vm %d %s]: %v; its overlaps with other VMs are split evenly\n", w.cfg.VM, w.cfg.Name, err)
		}
	}
	if w.sysDev != 0 && len(w.chans) > 0 {
		if w.ringDev, err = w.ringCounter(w.chans[0].stream, w.cfg.RingBase); err != nil {
			return fmt.Errorf("allocating the request ring's claim counter: %w", err)
		}
	}
	if w.cfg.Hops {
		// A diagnostic: a clock that cannot be related leaves out the
		// hops that need it, not the VM.
		w.mono = newMonoClock()
		c, err := syncGPUClock(d, w.mono)
		if err != nil {
			c.Error = err.Error()
		}
		w.clock = &c
	}
	return nil
}

// ringCounter allocates the VM's request ring claim counter
// (abi.RelocSyscallRing): a u64 of device memory, where the callers'
// fetch-and-adds stay on the GPU, set to base (the mediator's head) and
// ready before it returns.
func (w *worker) ringCounter(s cuStream, base uint64) (devptr, error) {
	p, err := w.d.MemAllocAsync(8, s)
	if err != nil {
		return 0, err
	}
	// A copy, not a stream memory operation: cuStreamWriteValue64 refuses
	// memory of the stream-ordered allocator (CUDA_ERROR_INVALID_VALUE on
	// an H100, driver 580). src stays alive until the stream has run it.
	src := new([8]byte)
	binary.LittleEndian.PutUint64(src[:], base)
	defer runtime.KeepAlive(src)
	if err := w.d.MemcpyHtoDAsync(p, unsafe.Pointer(src), 8, s); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		switch err := w.d.StreamQuery(s); {
		case err == nil:
			return p, nil
		case !errors.Is(err, errNotReady):
			return 0, err
		case time.Now().After(deadline):
			return 0, errors.New("the stream did not zero it within 10 s")
		}
	}
}

// run serves the ring until the mediator says stop, its socket closes or
// the context faults. Between commands it sleeps on the mediator's
// doorbell; while work is on the GPU it wakes every stall period to see
// whether a quiet stream faulted.
func (w *worker) run() error {
	head := w.blk.load(offHead)
	var rec abi.Record
	socketAt := time.Now()
	for {
		if w.blk.ready(head) {
			// At most a ring's worth before the socket's turn.
			for end := head + w.blk.l.ringCap; head != end && w.blk.ready(head); head++ {
				e := w.blk.entry(head)
				ch, seq := int(le.Uint32(e[entryChannel:])), le.Uint64(e[entrySeq:])
				copy(rec[:], e[entryRecord:])
				if ch < 0 || ch >= len(w.chans) {
					return fmt.Errorf("ring entry %d names channel %d of %d", head, ch, len(w.chans))
				}
				if w.cfg.Hops {
					w.traceRead(ch, seq)
				}
				if err := w.issue(w.chans[ch], seq, &rec); err != nil {
					return faultError{err}
				}
				if w.cfg.Hops {
					w.blk.store(w.blk.l.traceSlot(ch, seq)+traceLaunch, uint64(w.mono.now()))
				}
				w.blk.store(offHead, head+1)
			}
			// After the batch, not before it (a system call between a
			// command and its launch), and at most every socketCheck: a
			// mediator that went away ends the worker even while its ring
			// keeps it busy.
			if now := time.Now(); now.Sub(socketAt) >= socketCheck {
				socketAt = now
				if err := w.pollSocket(0); err != nil {
					return err
				}
			}
			continue
		}
		timeout := -1
		busy := w.busy()
		if busy {
			// Tracing may have come on after the last command was issued.
			if err := w.trace(); err != nil {
				return faultError{err}
			}
			if err := w.checkStalls(); err != nil {
				return faultError{err}
			}
			timeout = int(max(1, time.Duration(w.cfg.StallNs).Milliseconds()))
		}
		if w.spin(head) {
			continue
		}
		// Tell the mediator to ring, then look again: a command queued in
		// between is seen now or rung for.
		w.blk.store(offSleeping, 1)
		if w.blk.ready(head) {
			w.blk.store(offSleeping, 0)
			continue
		}
		if busy {
			// And the tracing switch: the mediator rings a sleeping worker
			// when it turns tracing on (tracing.go).
			if err := w.trace(); err != nil {
				return faultError{err}
			}
		}
		if err := w.wait(timeout); err != nil {
			return err
		}
		w.blk.store(offSleeping, 0)
	}
}

// socketCheck is how often a busy worker looks at its socket.
const socketCheck = time.Millisecond

// traceRead claims command seq's trace slot (the hop diagnostic) with the
// time the worker read it from the ring, before it issues it: its end can
// come before the launch call returns, and the mediator reads the slot
// when it sees the end. The launch's return (traceLaunch) follows, 0 until
// then.
func (w *worker) traceRead(ch int, seq uint64) {
	off := w.blk.l.traceSlot(ch, seq)
	w.blk.store(off+traceLaunch, 0)
	w.blk.store(off+traceRead, uint64(w.mono.now()))
	w.blk.store(off+traceStamp, seq)
}

// spin looks at the ring for SpinNs after it emptied (the mediator does
// not ring meanwhile: the worker is not marked sleeping) and reports
// whether a command came.
func (w *worker) spin(head uint64) bool {
	if w.cfg.SpinNs <= 0 {
		return false
	}
	for deadline := time.Now().Add(time.Duration(w.cfg.SpinNs)); time.Now().Before(deadline); {
		for range 64 {
			if w.blk.ready(head) {
				return true
			}
		}
	}
	return false
}

// wait sleeps until the doorbell rings, a message comes or timeout (ms, -1
// for none) passes.
func (w *worker) wait(timeout int) error {
	fds := []unix.PollFd{{Fd: int32(w.efd), Events: unix.POLLIN}, {Fd: int32(w.sock), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, timeout); err != nil && err != unix.EINTR {
		return fmt.Errorf("waiting for the mediator: %w", err)
	}
	if fds[0].Revents&unix.POLLIN != 0 {
		var b [8]byte
		_, _ = unix.Read(w.efd, b[:])
	}
	if fds[1].Revents != 0 {
		return w.readSocket()
	}
	return nil
}

// pollSocket handles a message (or the socket's end) if one is there
// within timeout ms.
func (w *worker) pollSocket(timeout int) error {
	fds := []unix.PollFd{{Fd: int32(w.sock), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, timeout); err != nil || n == 0 {
		return nil
	}
	return w.readSocket()
}

// readSocket reads the mediator's message: stop, a query (answered with
// the worker's state, keep.go), or the end of the socket.
func (w *worker) readSocket() error {
	m, err := readMsg(w.sock)
	if err != nil {
		return fmt.Errorf("the mediator's socket: %w", err)
	}
	switch m.Kind {
	case msgStop:
		return errWorkerStop
	case msgQuery:
		st := w.state()
		if err := sendMsg(w.sock, message{Kind: msgState, State: &st, Nonce: m.Nonce}); err != nil {
			return fmt.Errorf("answering the mediator's query: %w", err)
		}
	}
	return nil
}

// busy reports whether a channel has commands on the GPU.
func (w *worker) busy() bool {
	for _, ch := range w.chans {
		if w.blk.load(ch.base+offEnd) < ch.last {
			return true
		}
	}
	return false
}

// checkStalls asks the stream of each channel that made no progress for
// the stall period whether the context faulted.
func (w *worker) checkStalls() error {
	now := time.Now().UnixNano()
	for _, ch := range w.chans {
		end := w.blk.load(ch.base + offEnd)
		if end >= ch.last || end != ch.seenEnd {
			ch.seenEnd, ch.quietFrom = end, now
			continue
		}
		if now-ch.quietFrom < w.cfg.StallNs {
			continue
		}
		ch.quietFrom = now
		if err := w.d.StreamQuery(ch.stream); err != nil && err != errNotReady && sticky(err) {
			return err
		}
	}
	return nil
}

// decodeLimits are the worker's: the mediator applied the VM's limits.
var decodeLimits = abi.Limits{MaxThrottleNs: math.MaxUint64, MaxAllocSize: math.MaxUint64}

// issue puts command seq (rec) on ch's stream between its markers, with
// its code in its slot before anything that writes its end marker (a
// THROTTLE that launched: right after its launch call). An error
// is a failure of the context itself, which ends the VM's GPU work.
func (w *worker) issue(ch *wchan, seq uint64, rec *abi.Record) error {
	d := w.d
	c, code := abi.DecodeCommand(rec, w.lim, decodeLimits)
	var wk work
	if code == abi.OK {
		// Judge what can be judged now: such a command takes no GPU time.
		wk, code = w.prepare(&c)
	}
	ch.last = seq
	// A command that runs on the SMs is the tracer's (tracing.go): its
	// offIssued before the tracer looks, the tracer launched after the
	// command, off the command's path. Copies and the rest run beside
	// other contexts' kernels and leave the tracer alone.
	traced := code == abi.OK && (c.Op == abi.OpLaunch || c.Op == abi.OpThrottle || c.Op == abi.OpMemset)
	if traced {
		w.blk.store(ch.base+offIssued, seq)
	}
	if code == abi.OK && c.Op == abi.OpThrottle {
		// It writes its own markers when it runs. Its code goes in once
		// the launch call returned, not before it: the code slot's cache
		// line is the mediator's since it read the last command's code,
		// and taking it back is off the path from the ring to the launch
		// (the completer waits for the stamp of a THROTTLE that ended
		// first: completer.go, sweep). A launch that fails stamps its
		// code below, before the markers that end it are queued; a
		// sticky failure queues none and ends the worker.
		err := w.launchThrottle(ch, seq, c.DurationNs)
		if err == nil {
			w.setCode(ch, seq, abi.OK)
			return w.trace()
		}
		if sticky(err) {
			return err
		}
		code = codeOf(err)
	}
	w.setCode(ch, seq, code)
	if err := d.WriteValue64(ch.stream, ch.dev+offStart, seq); err != nil {
		return fmt.Errorf("writing a start marker: %w", err)
	}
	if wk != nil && code == abi.OK {
		if err := wk(ch.stream); err != nil {
			if sticky(err) {
				return err
			}
			w.setCode(ch, seq, codeOf(err))
		}
	}
	// The end marker goes on even when the work was refused, so that the
	// command completes in its place.
	if err := d.WriteValue64(ch.stream, ch.dev+offEnd, seq); err != nil {
		return fmt.Errorf("writing an end marker: %w", err)
	}
	if traced {
		return w.trace()
	}
	return nil
}

// setCode leaves command seq's code in its slot, the stamp last.
func (w *worker) setCode(ch *wchan, seq uint64, code abi.ErrorCode) {
	off := w.blk.l.codeOff(ch.idx, seq)
	w.blk.store(off+codeValue, uint64(code))
	w.blk.store(off+codeStamp, seq)
}
