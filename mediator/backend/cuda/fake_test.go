package cuda

import (
	"bytes"
	"debug/elf"
	"errors"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluice-gpu/sluice/mediator/backend/cuda/cubin/cubintest"
	"golang.org/x/sys/unix"
)

// fakeDriver is the driver API in Go, for testing the translation layer
// without a GPU. Streams run their operations at once, or queue them while
// hold is set (release runs them). Device memory is Go memory at made-up
// addresses; host-mapped and registered memory keeps its host address as
// its device address (UVA). A kernel named "fault" poisons its context as
// an illegal address would; the throttle kernel adds its duration to its
// record as the real one does, with its first and last reads of a fake
// %globaltimer on which throttle kernels run one after another. A kernel
// named "hang" never ends: its stream runs nothing after it until its
// context goes (a killed worker). With lateLaunch a throttle's launch call
// returns that long after its kernel ran.
type fakeDriver struct {
	mu        sync.Mutex
	next      uintptr
	cur       map[int]cuContext // per OS thread
	ctxs      map[cuContext]*fakeCtx
	streams   map[cuStream]*fakeStream
	mods      map[cuModule][]string
	funcs     map[cuFunction]string
	locals    map[string]uint64 // a kernel's local bytes a thread, by name (LinkPTX)
	regions   []fakeRegion
	hold      bool
	launches  []fakeLaunch
	calls     map[string]int
	wrongCtx  int // calls made with another context current than their object's
	allocErr  error
	streamErr error  // StreamCreate fails with it
	timer     uint64 // %globaltimer: throttle kernels run one after another on it
	// lateLaunch is how long a throttle's launch call takes to return
	// after its kernel ran (a worker descheduled right after its launch).
	lateLaunch time.Duration
}

type fakeCtx struct {
	fault     error
	destroyed bool
}

type fakeStream struct {
	ctx  cuContext
	ops  []func()
	hung bool // a "hang" kernel runs: nothing after it ever does
}

type fakeRegion struct {
	base uint64
	buf  []byte
	dev  bool // device memory (else host-mapped or registered)
	ctx  cuContext
}

type fakeLaunch struct {
	name        string
	grid, block [3]uint32
	shared      uint32
	args        []byte
}

func newFake() *fakeDriver {
	return &fakeDriver{
		next: 0x7000_0000_0000, cur: map[int]cuContext{}, ctxs: map[cuContext]*fakeCtx{},
		streams: map[cuStream]*fakeStream{}, mods: map[cuModule][]string{}, funcs: map[cuFunction]string{},
		locals: map[string]uint64{},
		calls:  map[string]int{},
	}
}

func (f *fakeDriver) handle() uintptr { f.next += 0x1000; return f.next }

func (f *fakeDriver) count(name string) { f.calls[name]++ }

// current is the calling thread's context (f.mu held).
func (f *fakeDriver) current() cuContext { return f.cur[unix.Gettid()] }

// onStream runs op on s now, or queues it while holding; ops of a faulted
// context never run.
func (f *fakeDriver) onStream(s cuStream, name string, op func()) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count(name)
	st, ok := f.streams[s]
	if !ok {
		return cudaErrorInvalidHandle
	}
	if st.ctx != f.current() {
		f.wrongCtx++
		return cudaErrorInvalidContext
	}
	if c := f.ctxs[st.ctx]; c.fault != nil {
		return c.fault
	}
	st.ops = append(st.ops, op)
	if !f.hold {
		f.runLocked(st, len(st.ops))
	}
	return nil
}

func (f *fakeDriver) runLocked(st *fakeStream, n int) {
	for n > 0 && len(st.ops) > 0 && !st.hung {
		if f.ctxs[st.ctx].fault != nil {
			st.ops = nil
			return
		}
		op := st.ops[0]
		st.ops = st.ops[1:]
		op()
		n--
	}
}

// release runs up to n queued operations of every stream of ctx (all
// contexts if 0).
func (f *fakeDriver) release(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, st := range f.streams {
		f.runLocked(st, n)
	}
}

// launched is a copy of the launches so far; counted, how often the named
// call was made; setErr sets allocErr or streamErr. They lock f: driver
// calls come from worker goroutines.
func (f *fakeDriver) launched() []fakeLaunch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.launches)
}

func (f *fakeDriver) counted(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

func (f *fakeDriver) setErr(p *error, err error) {
	f.mu.Lock()
	*p = err
	f.mu.Unlock()
}

func (f *fakeDriver) wrongContexts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wrongCtx
}

func (f *fakeDriver) setHold(h bool) {
	f.mu.Lock()
	f.hold = h
	f.mu.Unlock()
}

// mem is the memory at addr, n bytes long (f.mu held); nil if unmapped.
func (f *fakeDriver) mem(addr devptr, n uint64) []byte {
	for _, r := range f.regions {
		if uint64(addr) >= r.base && uint64(addr)-r.base+n <= uint64(len(r.buf)) {
			off := uint64(addr) - r.base
			return r.buf[off : off+n]
		}
	}
	return nil
}

func (f *fakeDriver) Init() error                      { return nil }
func (f *fakeDriver) DeviceGet(int) (int32, error)     { return 0, nil }
func (f *fakeDriver) DeviceName(int32) (string, error) { return "Fake GPU", nil }

func (f *fakeDriver) DeviceTotalMem(int32) (uint64, error) { return 80 << 30, nil }

func (f *fakeDriver) DevicePCIBusID(int32) (string, error) { return "0000:00:06.0", nil }

func (f *fakeDriver) CtxCreate(int32) (cuContext, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := cuContext(f.handle())
	f.ctxs[c] = &fakeCtx{}
	f.cur[unix.Gettid()] = c
	return c, nil
}

func (f *fakeDriver) CtxDestroy(c cuContext) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fc, ok := f.ctxs[c]
	if !ok || fc.destroyed {
		return cudaErrorInvalidContext
	}
	fc.destroyed = true
	f.regions = slices.DeleteFunc(f.regions, func(r fakeRegion) bool { return r.ctx == c })
	return nil
}

func (f *fakeDriver) CtxSetCurrent(c cuContext) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fc, ok := f.ctxs[c]; c != 0 && (!ok || fc.destroyed) {
		return cudaErrorInvalidContext
	}
	f.cur[unix.Gettid()] = c
	return nil
}

func (f *fakeDriver) StreamCreate() (cuStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.streamErr != nil {
		return 0, f.streamErr
	}
	s := cuStream(f.handle())
	f.streams[s] = &fakeStream{ctx: f.current()}
	return s, nil
}

func (f *fakeDriver) StreamQuery(s cuStream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("StreamQuery")
	st, ok := f.streams[s]
	switch {
	case !ok:
		return cudaErrorInvalidHandle
	case st.ctx != f.current():
		f.wrongCtx++
		return cudaErrorInvalidContext
	case f.ctxs[st.ctx].fault != nil:
		return f.ctxs[st.ctx].fault
	case len(st.ops) > 0:
		return cudaErrorNotReady
	}
	return nil
}

func (f *fakeDriver) WriteValue64(s cuStream, addr devptr, v uint64) error {
	return f.onStream(s, "WriteValue64", func() {
		if b := f.mem(addr, 8); b != nil {
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[0])), v)
		}
	})
}

func (f *fakeDriver) MemAllocAsync(size uint64, s cuStream) (devptr, error) {
	f.mu.Lock()
	if f.allocErr != nil {
		defer f.mu.Unlock()
		return 0, f.allocErr
	}
	p := f.handle()
	f.next += uintptr(size)
	f.regions = append(f.regions, fakeRegion{base: uint64(p), buf: make([]byte, size), dev: true, ctx: f.current()})
	f.mu.Unlock()
	return devptr(p), f.onStream(s, "MemAllocAsync", func() {})
}

func (f *fakeDriver) MemFreeAsync(p devptr, s cuStream) error {
	return f.onStream(s, "MemFreeAsync", func() {
		f.regions = slices.DeleteFunc(f.regions, func(r fakeRegion) bool { return r.dev && r.base == uint64(p) })
	})
}

func (f *fakeDriver) MemsetD8Async(p devptr, v byte, n uint64, s cuStream) error {
	return f.onStream(s, "MemsetD8Async", func() {
		if b := f.mem(p, n); b != nil {
			for i := range b {
				b[i] = v
			}
		}
	})
}

func (f *fakeDriver) MemcpyHtoDAsync(dst devptr, src unsafe.Pointer, n uint64, s cuStream) error {
	return f.onStream(s, "MemcpyHtoDAsync", func() { copy(f.mem(dst, n), unsafe.Slice((*byte)(src), n)) })
}

func (f *fakeDriver) MemcpyDtoHAsync(dst unsafe.Pointer, src devptr, n uint64, s cuStream) error {
	return f.onStream(s, "MemcpyDtoHAsync", func() { copy(unsafe.Slice((*byte)(dst), n), f.mem(src, n)) })
}

func (f *fakeDriver) MemcpyDtoDAsync(dst, src devptr, n uint64, s cuStream) error {
	return f.onStream(s, "MemcpyDtoDAsync", func() { copy(f.mem(dst, n), f.mem(src, n)) })
}

func (f *fakeDriver) MemHostGetDevicePointer(p unsafe.Pointer) (devptr, error) {
	return devptr(uintptr(p)), nil
}

func (f *fakeDriver) MemHostRegister(p unsafe.Pointer, size uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.regions = append(f.regions, fakeRegion{base: uint64(uintptr(p)), buf: unsafe.Slice((*byte)(p), size), ctx: f.current()})
	return nil
}

var (
	entryRE = regexp.MustCompile(`\.entry\s+([A-Za-z_][A-Za-z0-9_]*)`)
	// globalRE is a PTX global array of bytes, `.global .b8 name[size]`
	// (alignment and visibility aside): the fake's linker gives its
	// module a .nv.global of the sizes' sum.
	globalRE = regexp.MustCompile(`\.global\s+(?:\.align\s+\d+\s+)?\.b8\s+[A-Za-z_][A-Za-z0-9_]*\[(\d+)\]`)
	// localRE is a thread's local array of bytes, `.local .b8 name[size]`:
	// the fake gives every kernel of the module that much local memory a
	// thread.
	localRE = regexp.MustCompile(`\.local\s+(?:\.align\s+\d+\s+)?\.b8\s+[A-Za-z_][A-Za-z0-9_]*\[(\d+)\]`)
)

// The fake device's threads and stack: 4 SMs of 1024 threads, 1 KiB a
// thread.
const (
	fakeSMs, fakeThreadsPerSM = 4, 1024
	fakeStack                 = 1024
)

func (f *fakeDriver) DeviceAttribute(dev int32, attr int) (int32, error) {
	switch attr {
	case attrSMs:
		return fakeSMs, nil
	case attrThreadsPerSM:
		return fakeThreadsPerSM, nil
	}
	return 0, cudaErrorInvalidValue
}

func (f *fakeDriver) CtxStackSize() (uint64, error) { return fakeStack, nil }

func (f *fakeDriver) FuncLocalSize(fn cuFunction) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name, ok := f.funcs[fn]
	if !ok {
		return 0, cudaErrorInvalidHandle
	}
	return f.locals[name], nil
}

// ptxEntries are the kernels PTX declares, or an error as the driver's.
func ptxEntries(ptx []byte) ([]string, error) {
	if len(ptx) == 0 || ptx[len(ptx)-1] != 0 || bytes.IndexByte(ptx, 0) != len(ptx)-1 {
		return nil, cudaErrorInvalidImage // PTX must arrive NUL terminated, once
	}
	var names []string
	for _, m := range entryRE.FindAllSubmatch(ptx, -1) {
		names = append(names, string(m[1]))
	}
	if len(names) == 0 {
		return nil, cudaErrorInvalidPTX
	}
	return names, nil
}

// LinkPTX makes a cubin-shaped image of ptx: a code section a kernel and
// the global arrays' bytes in .nv.global.
func (f *fakeDriver) LinkPTX(ptx []byte) ([]byte, error) {
	f.mu.Lock()
	f.calls["LinkPTX"]++
	f.mu.Unlock()
	names, err := ptxEntries(ptx)
	if err != nil {
		return nil, err
	}
	var img cubintest.Image
	for _, n := range names {
		img.Sections = append(img.Sections, cubintest.Kernel(n))
	}
	var global uint64
	for _, m := range globalRE.FindAllSubmatch(ptx, -1) {
		n, err := strconv.ParseUint(string(m[1]), 10, 64)
		if err != nil {
			return nil, cudaErrorInvalidPTX
		}
		global += n
	}
	if global > 0 {
		img.Sections = append(img.Sections, cubintest.Global(global))
	}
	for _, m := range localRE.FindAllSubmatch(ptx, -1) {
		n, err := strconv.ParseUint(string(m[1]), 10, 64)
		if err != nil {
			return nil, cudaErrorInvalidPTX
		}
		f.mu.Lock()
		for _, name := range names {
			f.locals[name] = max(f.locals[name], n)
		}
		f.mu.Unlock()
	}
	return cubintest.Build(img), nil
}

// ModuleLoadData loads PTX (the mediator's own kernels) or a cubin (the
// kernels of its .text.* sections).
func (f *fakeDriver) ModuleLoadData(image []byte) (cuModule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	if bytes.HasPrefix(image, []byte(elf.ELFMAG)) {
		e, err := elf.NewFile(bytes.NewReader(image))
		if err != nil || e.Machine != elf.EM_CUDA {
			return 0, cudaErrorInvalidImage
		}
		for _, s := range e.Sections {
			if n, ok := strings.CutPrefix(s.Name, ".text."); ok {
				names = append(names, n)
			}
		}
	} else {
		var err error
		if names, err = ptxEntries(image); err != nil {
			return 0, err
		}
	}
	f.calls["ModuleLoadData"]++
	m := cuModule(f.handle())
	f.mods[m] = names
	return m, nil
}

func (f *fakeDriver) ModuleGetFunction(m cuModule, name string) (cuFunction, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.mods[m], name) {
		return 0, cudaErrorNotFound
	}
	fn := cuFunction(f.handle())
	f.funcs[fn] = name
	return fn, nil
}

func (f *fakeDriver) LaunchKernel(fn cuFunction, grid, block [3]uint32, shared uint32, s cuStream, args []byte) error {
	f.mu.Lock()
	name, ok := f.funcs[fn]
	ctx := cuContext(0)
	if st := f.streams[s]; st != nil {
		ctx = st.ctx
	}
	f.mu.Unlock()
	if !ok {
		return cudaErrorInvalidHandle
	}
	if block[0]*block[1]*block[2] > 1024 {
		return cudaErrorInvalidValue
	}
	args = slices.Clone(args)
	f.mu.Lock()
	late := f.lateLaunch
	f.mu.Unlock()
	if late > 0 && name == throttleName {
		defer time.Sleep(late) // after the kernel ran (unless held)
	}
	return f.onStream(s, "LaunchKernel", func() {
		f.launches = append(f.launches, fakeLaunch{name: name, grid: grid, block: block, shared: shared, args: args})
		switch name {
		case throttleName:
			// As the kernel: the start marker, its run, the end marker,
			// then the record, seq last (the completer waits for it).
			seq := le.Uint64(args[24:])
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&f.mem(devptr(le.Uint64(args[32:])), 8)[0])), seq)
			rec := f.mem(devptr(le.Uint64(args)), 32)
			ns := le.Uint64(args[8:])
			first := f.timer
			f.timer += ns
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&f.mem(devptr(le.Uint64(args[40:])), 8)[0])), seq)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&rec[0])), ns)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&rec[8])), first)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&rec[16])), f.timer)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&rec[24])), seq)
		case tracerName:
			// As a tracer that found its VM's commands all ended: it
			// starts and ends at once (the fake's streams run one op
			// after another, not at once).
			base, idx := devptr(le.Uint64(args)), le.Uint64(args[32:])
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&f.mem(base+offSentLive, 8)[0])), idx)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&f.mem(base+offSentDone, 8)[0])), idx)
		case "fault":
			f.ctxs[ctx].fault = cudaErrorIllegalAddress
		case "hang":
			f.streams[s].hung = true
		}
	})
}

// end is a worker process's end: its context goes with whatever its
// streams held.
func (f *fakeDriver) end(c cuContext) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fc, ok := f.ctxs[c]; ok && !fc.destroyed {
		fc.destroyed, fc.fault = true, cudaErrorInvalidContext
		f.regions = slices.DeleteFunc(f.regions, func(r fakeRegion) bool { return r.ctx == c })
	}
	for _, st := range f.streams {
		if st.ctx == c {
			st.ops = nil
		}
	}
}

// inProcess starts workers as goroutines of the test process, on d, and
// keeps the last one of each VM for the tests to look into.
type inProcess struct {
	d  driver
	mu sync.Mutex
	ws map[uint32]*worker
}

func (p *inProcess) spawn(cfg workerConfig, f workerFiles) (proc, error) {
	w := newWorker(p.d, cfg, f.shared, f.heapMem, f.sock, f.efd).withSyscalls(f.sysMem)
	p.mu.Lock()
	if p.ws == nil {
		p.ws = map[uint32]*worker{}
	}
	p.ws[cfg.VM] = w
	p.mu.Unlock()
	g := &goProc{done: make(chan struct{}), sock: f.sock}
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine
		g.err = w.serve()
		if g.killed.Load() {
			// A killed process's context ends with it (the worker made it
			// on this goroutine).
			if fd, ok := p.d.(*fakeDriver); ok {
				fd.end(w.ctx)
			}
		}
		g.mu.Lock()
		_ = unix.Close(g.sock)
		g.sock = -1
		g.mu.Unlock()
		close(g.done)
	}()
	return g, nil
}

func (p *inProcess) worker(vm uint32) *worker {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ws[vm]
}

// goProc is a worker goroutine. kill shuts its socket down: the worker
// ends at its next look (the fake's calls never block), as if killed, and
// its context goes with it.
type goProc struct {
	done   chan struct{}
	err    error
	killed atomic.Bool
	mu     sync.Mutex // sock against its close
	sock   int        // the worker's end; -1 once closed
}

func (g *goProc) kill() {
	g.killed.Store(true)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sock >= 0 {
		_ = unix.Shutdown(g.sock, unix.SHUT_RDWR)
	}
}

func (g *goProc) wait() error { <-g.done; return g.err }

func (g *goProc) pidfd() (int, error) {
	return -1, errors.New("a worker goroutine is not a process of its own")
}
