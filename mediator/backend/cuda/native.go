package cuda

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/sluice-gpu/sluice/mediator/internal/lathist"
	"golang.org/x/sys/unix"
)

// The native baseline: the benchmark's kernels launched straight through
// the driver API by one process, without the mediator, rings, channels,
// accounting or scheduling, so that a benchmark on a GPU can show Sluice
// beside what the GPU does without it.
//
// One process makes one context, loads the THROTTLE kernel and gives each
// VM of the plan a non-blocking stream per channel. It keeps each stream's
// depth of kernels in flight, sleeping a VM's sleep after each completion
// before the kernel that replaces it, honouring the VM's start and its on
// and off stretches, as the benchmark's guests do. It spins on the kernels'
// end markers (host memory mapped into the context, as the workers' are)
// from one thread: a completion is seen within a sweep of the stores.
//
// All of it runs in one context: the streams' one-thread kernels run side
// by side on the GPU's SMs where Sluice's VMs, a context each, take turns.
// Native throughput with several VMs is therefore not a bound Sluice could
// reach but what the same kernels cost without isolation, and GPUBusyNs
// (the kernels' own time summed) can exceed the stretch; GPUSpanNs is the
// time at least one kernel ran.

// NativeVM is one VM's load in a native run.
type NativeVM struct {
	Name     string `json:"name"`
	Streams  int    `json:"streams"`   // the VM's channels, a stream each
	Depth    int    `json:"depth"`     // kernels kept in flight per stream
	KernelNs int64  `json:"kernel_ns"` // each kernel's length
	SleepNs  int64  `json:"sleep_ns"`  // after a completion, before the kernel that replaces it
	StartNs  int64  `json:"start_ns"`  // before the first kernel
	// OnNs and OffNs, both or neither: kernels launch only in the on
	// stretches, which alternate with the off ones from the start.
	OnNs  int64 `json:"on_ns,omitempty"`
	OffNs int64 `json:"off_ns,omitempty"`
	// Kernels is how many kernels an app VM runs (over its streams);
	// 0: a throttle VM, which launches until the run ends.
	Kernels int64 `json:"kernels,omitempty"`
}

// NativePlan is a native run.
type NativePlan struct {
	Device  int    `json:"device"`            // the GPU's ordinal
	Library string `json:"library,omitempty"` // the driver's path; default libcuda.so.1
	GapNs   uint64 `json:"gap_ns"`            // the THROTTLE kernel's gap; 0: DefaultGapNs
	// DurationNs is how long throttle VMs run; the run ends when it has
	// passed and every app VM has completed.
	DurationNs int64      `json:"duration_ns"`
	VMs        []NativeVM `json:"vms"`
	// StreamMarkers puts a kernel's start and end markers on its stream
	// as stream memory operations (cuStreamWriteValue64) around it, as a
	// GPU worker does for a LAUNCH, instead of the THROTTLE kernel writing
	// them itself: what the two memops cost a kernel.
	StreamMarkers bool `json:"stream_markers,omitempty"`
}

// NativeMarkersEnv set to 1 makes RunNative's runs StreamMarkers ones (a
// diagnostic: the benchmark's baseline is without).
const NativeMarkersEnv = "SLUICE_NATIVE_STREAM_MARKERS"

// nativeHops are the native loop's hops (the hop diagnostic, HopsEnv).
const (
	nhopEnqueue = iota
	nhopLaunchedStart
	nhopKernel
	nhopEndSeen
	nhopLaunchedSeenLessKernel
	nhopSeenLaunch
	nhopLaunchLaunch
)

var nativeHops = [][2]string{
	nhopEnqueue:                {"enqueue_call", "the launch call (with StreamMarkers, the two memops and the launch) until it returned"},
	nhopLaunchedStart:          {"launched_to_kernel_start", "the launch call's return to the kernel's first %globaltimer read (needs gpu_clock)"},
	nhopKernel:                 {"kernel", "the THROTTLE kernel's first to last %globaltimer read"},
	nhopEndSeen:                {"kernel_end_to_end_seen", "the kernel's last %globaltimer read to the loop seeing its end marker (needs gpu_clock)"},
	nhopLaunchedSeenLessKernel: {"launched_to_end_seen_less_kernel", "the launch call's return to the end marker seen, less the kernel"},
	nhopSeenLaunch:             {"end_seen_to_next_launch", "the loop seeing an end to the start of the stream's next launch call"},
	nhopLaunchLaunch:           {"launch_to_launch", "a stream's launch call to its next: the period of a depth-1 loop"},
}

// NativeResult is what a native run measured over its stretch, from the
// first launch to its end.
type NativeResult struct {
	Device     string `json:"device"`
	DurationNs int64  `json:"duration_ns"`
	// GPUBusyNs is the sum of the completed kernels' own %globaltimer time
	// (as GroundTruth counts it); GPUSpanNs the time in which at least one
	// of them ran (the union of their spans).
	GPUBusyNs int64            `json:"gpu_busy_ns"`
	GPUSpanNs int64            `json:"gpu_span_ns"`
	Kernels   int64            `json:"kernels"`
	VMs       []NativeVMResult `json:"vms"`
	// StreamMarkers: the markers were stream memops (NativePlan's).
	StreamMarkers bool `json:"stream_markers,omitempty"`
}

// NativeVMResult is one VM's figures in a native run.
type NativeVMResult struct {
	Name    string `json:"name"`
	Kernels int64  `json:"kernels"` // completed in the stretch
	GPUNs   int64  `json:"gpu_ns"`  // their own %globaltimer time
	// LatencyP50Ns and LatencyP99Ns are quantiles of launch to completion
	// seen by the host (upper bounds within 1.6%).
	LatencyP50Ns int64 `json:"latency_p50_ns"`
	LatencyP99Ns int64 `json:"latency_p99_ns"`
	// TurnaroundNs is an app VM's first launch to its last completion; 0
	// for a throttle VM.
	TurnaroundNs int64 `json:"turnaround_ns"`
}

// Validate reports the first thing wrong with p.
func (p NativePlan) Validate() error {
	if p.DurationNs < 0 {
		return fmt.Errorf("native plan: negative duration %d", p.DurationNs)
	}
	if len(p.VMs) == 0 {
		return errors.New("native plan: no VMs")
	}
	for i, v := range p.VMs {
		switch {
		case v.Streams < 1 || v.Streams > 1024:
			return fmt.Errorf("native plan: vm %d (%s): %d streams, want 1 to 1024", i, v.Name, v.Streams)
		case v.Depth < 1 || v.Depth > 1<<16:
			return fmt.Errorf("native plan: vm %d (%s): depth %d, want 1 to 65536", i, v.Name, v.Depth)
		case v.KernelNs < 0 || v.SleepNs < 0 || v.StartNs < 0 || v.Kernels < 0:
			return fmt.Errorf("native plan: vm %d (%s): negative kernel, sleep, start or kernels", i, v.Name)
		case (v.OnNs > 0) != (v.OffNs > 0) || v.OnNs < 0 || v.OffNs < 0:
			return fmt.Errorf("native plan: vm %d (%s): on and off must both be positive or both 0", i, v.Name)
		}
	}
	return nil
}

// RunNative runs p in a process of its own (this binary, started again with
// NativeCommand, which must run NativeMain): one context, no mediator. Its errors carry what the
// process said on stderr. Cancelling ctx kills it.
func RunNative(ctx context.Context, p NativePlan) (*NativeResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if os.Getenv(NativeMarkersEnv) == "1" {
		p.StreamMarkers = true
	}
	in, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding the native plan: %w", err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Args = []string{"sluice-native", NativeCommand}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &out, &errOut
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(errOut.String()); msg != "" {
			return nil, fmt.Errorf("running the native baseline: %s (%w)", msg, err)
		}
		return nil, fmt.Errorf("running the native baseline: %w", err)
	}
	var res NativeResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("reading the native baseline's result: %w", err)
	}
	return &res, nil
}

// NativeMain is the native runner process's main, which the binary runs
// for NativeCommand: the plan on stdin, the result on stdout, an error on
// stderr with exit status 1.
func NativeMain() int {
	runtime.LockOSThread()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var p NativePlan
	if err := json.NewDecoder(os.Stdin).Decode(&p); err != nil {
		return fail(fmt.Errorf("reading the native plan: %w", err))
	}
	lib, err := loadLibcuda(p.Library)
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := runNative(ctx, lib, p)
	if err != nil {
		return fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return fail(fmt.Errorf("writing the native result: %w", err))
	}
	return 0
}

// Native streams' blocks in the mapped area: start and end markers, then
// one record slot per kernel in flight (shared.go's GPU area, alone).
const nativeMinSlots = 64

// nstream is one stream of a native run.
type nstream struct {
	vm    *nvm
	s     cuStream
	base  uintptr // the block's offset in the mapped area
	dev   devptr  // its device address
	slots int
	next  uint64  // the seq of the next launch (the first is 1)
	seen  uint64  // the last completion handled
	sent  []int64 // launch time, by slot
	// The hop diagnostic's: when each launch call returned (by slot), when
	// the last end was seen and the last launch began (CLOCK_MONOTONIC).
	launched           []int64
	lastSeen, lastCall int64
	due                []int64 // launches waiting for their time (in order)
	quiet              int64   // since when the stream made no progress with work out
	quietE             uint64  // the end marker then
}

// nvm is one VM of a native run.
type nvm struct {
	p         NativeVM
	left      int64 // app: kernels not launched yet
	done      int64
	gpuNs     int64
	lat       lathist.Hist
	first     int64 // first launch; -1 before
	last      int64 // last completion
	completed bool  // app: all its kernels completed
	inFlight  int64 // launched and not completed
}

// nativeRun is the state of runNative.
type nativeRun struct {
	d       driver
	p       NativePlan
	gap     uint64
	fn      cuFunction
	mem     []byte
	base    unsafe.Pointer
	memDev  devptr
	vms     []*nvm
	streams []*nstream
	t0      time.Time
	spans   [][2]uint64 // kernels' [first, last] timer reads, merged now and then
	loose   int         // spans added since the last merge
	scratch devptr      // where a StreamMarkers run's kernels write their own markers

	// The hop diagnostic (HopsEnv); hops nil: off.
	hops  *hopSet
	mono  monoClock
	clock GPUClock
	mono0 int64 // t0 on CLOCK_MONOTONIC
}

// nativeStall is how long a stream with work out may show no progress
// before the run asks the driver whether the context faulted.
const nativeStall = time.Second

// runNative runs p on d from the calling goroutine, which must be locked to
// its OS thread (the context is current on it).
func runNative(ctx context.Context, d driver, p NativePlan) (res *NativeResult, err error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	r := &nativeRun{d: d, p: p, gap: p.GapNs}
	if r.gap == 0 {
		r.gap = DefaultGapNs
	}
	if err := d.Init(); err != nil {
		return nil, fmt.Errorf("initializing the CUDA driver: %w", err)
	}
	dev, err := d.DeviceGet(p.Device)
	if err != nil {
		return nil, fmt.Errorf("getting CUDA device %d: %w", p.Device, err)
	}
	name, err := d.DeviceName(dev)
	if err != nil {
		return nil, fmt.Errorf("naming CUDA device %d: %w", p.Device, err)
	}
	cctx, err := d.CtxCreate(dev)
	if err != nil {
		return nil, fmt.Errorf("creating a context: %w", err)
	}
	defer func() { _ = d.CtxDestroy(cctx) }() // frees what was made in it
	if err := r.setup(cctx); err != nil {
		return nil, err
	}
	defer func() { _ = unix.Munmap(r.mem) }()
	hopsPath := os.Getenv(HopsEnv)
	if hopsPath != "" {
		r.hops, r.mono = newHopSet(nativeHops), newMonoClock()
		if r.clock, err = syncGPUClock(d, r.mono); err != nil {
			r.clock.Error = err.Error()
		}
	}
	w, err := r.loop(ctx)
	if err != nil {
		return nil, err
	}
	r.drain()
	if r.hops != nil {
		rep := HopReport{Path: "native", GPUClock: &r.clock, Hops: r.hops.report(),
			Note: "per-kernel hop times of the native baseline's loop (ns), as the cuda backend's hop report; stream_markers: " + strconv.FormatBool(p.StreamMarkers)}
		if err := writeHopReport(hopsPath+".native.json", rep); err != nil {
			return nil, err
		}
	}
	res = &NativeResult{Device: name, DurationNs: w, GPUSpanNs: r.span(), StreamMarkers: p.StreamMarkers}
	for _, v := range r.vms {
		vr := NativeVMResult{Name: v.p.Name, Kernels: v.done, GPUNs: v.gpuNs,
			LatencyP50Ns: v.lat.Quantile(0.5), LatencyP99Ns: v.lat.Quantile(0.99)}
		if v.completed && v.first >= 0 {
			vr.TurnaroundNs = v.last - v.first
		}
		res.Kernels += vr.Kernels
		res.GPUBusyNs += vr.GPUNs
		res.VMs = append(res.VMs, vr)
	}
	return res, nil
}

// setup makes the module, the mapped marker area and the streams in cctx.
func (r *nativeRun) setup(cctx cuContext) error {
	d := r.d
	if err := d.CtxSetCurrent(cctx); err != nil {
		return fmt.Errorf("making the context current: %w", err)
	}
	mod, err := d.ModuleLoadData(append([]byte(throttlePTX), 0))
	if err != nil {
		return fmt.Errorf("loading the throttle kernel: %w", err)
	}
	if r.fn, err = d.ModuleGetFunction(mod, throttleName); err != nil {
		return fmt.Errorf("finding the throttle kernel: %w", err)
	}
	size := uintptr(64) // the scratch markers first
	for _, v := range r.p.VMs {
		size += uintptr(v.Streams) * (offSlots + uintptr(nativeSlots(v.Depth))*slotSize)
	}
	// Outside the Go heap, page aligned: page-locked and mapped into the
	// context as the workers' GPU areas are.
	if r.mem, err = unix.Mmap(-1, 0, int(pageUp(size)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS); err != nil {
		return fmt.Errorf("mapping the native run's %d-byte marker area: %w", size, err)
	}
	r.base = unsafe.Pointer(unsafe.SliceData(r.mem))
	if err := d.MemHostRegister(r.base, uint64(len(r.mem))); err != nil {
		_ = unix.Munmap(r.mem)
		return fmt.Errorf("registering the native run's marker area: %w", err)
	}
	if r.memDev, err = d.MemHostGetDevicePointer(r.base); err != nil {
		_ = unix.Munmap(r.mem)
		return fmt.Errorf("mapping the native run's marker area: %w", err)
	}
	r.scratch = r.memDev
	off := uintptr(64)
	for _, p := range r.p.VMs {
		v := &nvm{p: p, left: p.Kernels, first: -1}
		r.vms = append(r.vms, v)
		for range p.Streams {
			s, err := d.StreamCreate()
			if err != nil {
				_ = unix.Munmap(r.mem)
				return fmt.Errorf("creating a stream of vm %s: %w", p.Name, err)
			}
			n := nativeSlots(p.Depth)
			st := &nstream{vm: v, s: s, base: off, dev: r.memDev + devptr(off), slots: n, next: 1, sent: make([]int64, n), launched: make([]int64, n)}
			for range p.Depth {
				st.due = append(st.due, p.StartNs)
			}
			r.streams = append(r.streams, st)
			off += offSlots + uintptr(n)*slotSize
		}
	}
	return nil
}

// nativeSlots is the record slots of a stream of depth kernels in flight.
func nativeSlots(depth int) int {
	n := nativeMinSlots
	for n < depth {
		n *= 2
	}
	return n
}

func (r *nativeRun) word(off uintptr) *uint64 { return (*uint64)(unsafe.Add(r.base, off)) }
func (r *nativeRun) load(off uintptr) uint64  { return atomic.LoadUint64(r.word(off)) }

func (r *nativeRun) now() int64 { return int64(time.Since(r.t0)) }

// limit is how long a run may take before it counts as stalled (as the
// benchmark runner's).
func (r *nativeRun) limit() int64 {
	var work int64
	for _, v := range r.p.VMs {
		work += v.StartNs + v.Kernels*(v.KernelNs+v.SleepNs)
	}
	return 10*(r.p.DurationNs+work) + 10e9
}

// loop launches and completes until the duration has passed and every app
// VM has completed; it returns that moment, the end of the stretch.
func (r *nativeRun) loop(ctx context.Context) (int64, error) {
	r.t0 = time.Now()
	if r.hops != nil {
		r.mono0 = r.mono.of(r.t0)
	}
	limit := r.limit()
	apps := 0
	for _, v := range r.vms {
		if v.p.Kernels > 0 {
			apps++
		}
	}
	for sweep := 0; ; sweep++ {
		now := r.now()
		if sweep%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, fmt.Errorf("running the native baseline: %w", err)
			}
			if now > limit {
				return 0, fmt.Errorf("the native baseline stalled: not done after %s", time.Duration(now))
			}
		}
		for _, st := range r.streams {
			n, err := r.complete(st, now)
			if err != nil {
				return 0, err
			}
			apps -= n
			if err := r.launch(st, now); err != nil {
				return 0, err
			}
		}
		if now >= r.p.DurationNs && apps == 0 {
			return now, nil
		}
	}
}

// complete handles the kernels of st that ended since the last sweep and
// queues the ones that replace them; it returns how many app VMs completed
// with them (0 or 1).
func (r *nativeRun) complete(st *nstream, now int64) (int, error) {
	end := r.load(st.base + offEnd)
	v := st.vm
	if end == st.seen {
		if st.next-1 > st.seen {
			return 0, r.checkStall(st, end)
		}
		return 0, nil
	}
	if end < st.seen || end >= st.next {
		return 0, fmt.Errorf("vm %s: the end marker %d is outside (%d, %d)", v.p.Name, end, st.seen, st.next)
	}
	st.quiet, st.quietE = 0, end
	appsDone := 0
	for seq := st.seen + 1; seq <= end; seq++ {
		slot := st.base + offSlots + uintptr(seq%uint64(st.slots))*slotSize
		// The kernel writes its record after its end marker: wait for it
		// (the spin below bounds the wait: a few posted stores).
		for i := 0; r.load(slot+24) != seq; i++ {
			if i == 1_000_000 {
				return 0, fmt.Errorf("vm %s: kernel %d ended without its record", v.p.Name, seq)
			}
		}
		if r.hops != nil {
			r.kernelHops(st, seq, slot, now)
		}
		v.done++
		v.gpuNs += int64(r.load(slot))
		if first, last := r.load(slot+8), r.load(slot+16); last > first {
			r.addSpan(first, last)
		}
		v.lat.Add(now - st.sent[seq%uint64(st.slots)])
		v.last = now
		v.inFlight--
		if v.p.Kernels > 0 && v.left == 0 && v.inFlight == 0 && !v.completed {
			v.completed = true
			appsDone++
			continue
		}
		if v.p.Kernels == 0 || v.left > 0 {
			st.due = append(st.due, now+v.p.SleepNs)
		}
	}
	st.seen = end
	return appsDone, nil
}

// checkStall asks the driver whether a stream that made no progress for
// nativeStall with work out is in a faulted context.
func (r *nativeRun) checkStall(st *nstream, end uint64) error {
	now := r.now()
	if st.quiet == 0 || st.quietE != end {
		st.quiet, st.quietE = now, end
		return nil
	}
	if now-st.quiet < int64(nativeStall) {
		return nil
	}
	st.quiet = now
	if err := r.d.StreamQuery(st.s); err != nil && err != errNotReady && sticky(err) {
		return fmt.Errorf("vm %s: the context faulted: %w", st.vm.p.Name, err)
	}
	return nil
}

// launch launches st's kernels that are due, outside the VM's off stretches.
func (r *nativeRun) launch(st *nstream, now int64) error {
	v := st.vm
	for len(st.due) > 0 && st.due[0] <= now && offDelay(v.p, now) == 0 {
		if v.p.Kernels > 0 && v.left == 0 {
			st.due = st.due[:0]
			break
		}
		seq := st.next
		st.sent[seq%uint64(st.slots)] = r.now()
		var call int64
		if r.hops != nil {
			call = r.mono.now()
		}
		if err := r.enqueue(st, seq); err != nil {
			return fmt.Errorf("vm %s: launching a kernel: %w", v.p.Name, err)
		}
		if r.hops != nil {
			r.launchHops(st, seq, call)
		}
		st.next++
		st.due = st.due[1:]
		v.inFlight++
		if v.first < 0 {
			v.first = now
		}
		if v.p.Kernels > 0 {
			v.left--
		}
	}
	return nil
}

// enqueue puts kernel seq of st on its stream: the THROTTLE kernel, which
// writes its markers itself, or with StreamMarkers the kernel writing its
// own to scratch between two stream memops that write the stream's.
func (r *nativeRun) enqueue(st *nstream, seq uint64) error {
	v := st.vm
	slot := r.memDev + devptr(st.base+offSlots+uintptr(seq%uint64(st.slots))*slotSize)
	start, end := st.dev+offStart, st.dev+offEnd
	if r.p.StreamMarkers {
		start, end = r.scratch, r.scratch+8
		if err := r.d.WriteValue64(st.s, st.dev+offStart, seq); err != nil {
			return err
		}
	}
	args := throttleArgs(slot, uint64(v.p.KernelNs), r.gap, seq, start, end)
	if err := r.d.LaunchKernel(r.fn, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, st.s, args); err != nil {
		return err
	}
	if r.p.StreamMarkers {
		return r.d.WriteValue64(st.s, st.dev+offEnd, seq)
	}
	return nil
}

// launchHops records the hops of a launch call that began at call.
func (r *nativeRun) launchHops(st *nstream, seq uint64, call int64) {
	ret := r.mono.now()
	st.launched[seq%uint64(st.slots)] = ret
	r.hops.add(nhopEnqueue, ret-call)
	if st.lastSeen != 0 {
		r.hops.add(nhopSeenLaunch, call-st.lastSeen)
		st.lastSeen = 0
	}
	if st.lastCall != 0 {
		r.hops.add(nhopLaunchLaunch, call-st.lastCall)
	}
	st.lastCall = call
}

// kernelHops records the hops of kernel seq of st (its record at slot),
// whose end the sweep that began at now (the run's clock) saw.
func (r *nativeRun) kernelHops(st *nstream, seq uint64, slot uintptr, now int64) {
	seen, launched := r.mono0+now, st.launched[seq%uint64(st.slots)]
	first, last := int64(r.load(slot+8)), int64(r.load(slot+16))
	r.hops.add(nhopKernel, last-first)
	r.hops.add(nhopLaunchedSeenLessKernel, seen-launched-(last-first))
	if r.clock.OK {
		r.hops.add(nhopLaunchedStart, first-r.clock.OffsetNs-launched)
		r.hops.add(nhopEndSeen, seen-(last-r.clock.OffsetNs))
	}
	st.lastSeen = seen
}

// offDelay is how long until v's next on stretch, 0 inside one.
func offDelay(v NativeVM, now int64) int64 {
	if v.OnNs <= 0 || now < v.StartNs {
		return 0
	}
	cycle := v.OnNs + v.OffNs
	if phase := (now - v.StartNs) % cycle; phase >= v.OnNs {
		return cycle - phase
	}
	return 0
}

// drain waits (a while at most) for the kernels still in flight, so that
// the context goes only after them.
func (r *nativeRun) drain() {
	var longest int64
	for _, v := range r.p.VMs {
		longest = max(longest, v.KernelNs*int64(v.Depth))
	}
	deadline := time.Now().Add(time.Duration(longest) + time.Second)
	for _, st := range r.streams {
		for r.load(st.base+offEnd) < st.next-1 && time.Now().Before(deadline) {
			runtime.Gosched()
		}
	}
}

// addSpan adds a kernel's span, merging the list now and then so that it
// stays as long as the GPU's busy stretches are many.
func (r *nativeRun) addSpan(first, last uint64) {
	r.spans = append(r.spans, [2]uint64{first, last})
	if r.loose++; r.loose >= 1<<16 {
		r.spans = mergeSpans(r.spans)
		r.loose = 0
	}
}

// span is the length of the union of the spans.
func (r *nativeRun) span() int64 {
	var sum uint64
	for _, s := range mergeSpans(r.spans) {
		sum += s[1] - s[0]
	}
	return int64(sum)
}

// mergeSpans sorts spans and merges those that overlap or touch.
func mergeSpans(spans [][2]uint64) [][2]uint64 {
	slices.SortFunc(spans, func(a, b [2]uint64) int {
		switch {
		case a[0] < b[0]:
			return -1
		case a[0] > b[0]:
			return 1
		}
		return 0
	})
	out := spans[:0]
	for _, s := range spans {
		if n := len(out); n > 0 && s[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], s[1])
			continue
		}
		out = append(out, s)
	}
	return out
}
