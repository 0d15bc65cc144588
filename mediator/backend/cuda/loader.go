package cuda

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// libcuda is the real driver: libcuda.so.1 loaded at run time with purego,
// so the mediator stays a static binary without cgo and runs (with other
// backends) on hosts without a GPU.
type libcuda struct {
	fn struct {
		init, deviceGet, deviceGetName                     uintptr
		deviceTotalMem, deviceGetPCIBusID                  uintptr
		ctxCreate, ctxDestroy, ctxSetCurrent               uintptr
		streamCreate, streamQuery, writeValue              uintptr
		memAllocAsync, memFreeAsync, memsetD8Async         uintptr
		memcpyHtoDAsync, memcpyDtoHAsync, memcpyDtoDAsync  uintptr
		memHostRegister, memHostGetDevicePointer           uintptr
		moduleLoadData, moduleGetFunction, launchKernel    uintptr
		linkCreate, linkAddData, linkComplete, linkDestroy uintptr
		deviceGetAttribute, ctxGetLimit, funcGetAttribute  uintptr
	}
}

// libraryName is the driver's soname; LibraryPath overrides it.
const libraryName = "libcuda.so.1"

var (
	loadOnce sync.Once
	loaded   *libcuda
	loadErr  error
)

// loadLibcuda opens the driver once per process.
func loadLibcuda(path string) (*libcuda, error) {
	loadOnce.Do(func() { loaded, loadErr = openLibcuda(path) })
	return loaded, loadErr
}

func openLibcuda(path string) (*libcuda, error) {
	if path == "" {
		path = libraryName
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("loading the CUDA driver %s (is the NVIDIA driver installed?): %w", path, err)
	}
	l := &libcuda{}
	f := &l.fn
	// Versioned names where the driver has them: the unversioned symbols
	// keep the oldest signatures for old binaries.
	syms := []struct {
		p    *uintptr
		name string
	}{
		{&f.init, "cuInit"}, {&f.deviceGet, "cuDeviceGet"}, {&f.deviceGetName, "cuDeviceGetName"},
		{&f.deviceTotalMem, "cuDeviceTotalMem_v2"}, {&f.deviceGetPCIBusID, "cuDeviceGetPCIBusId"},
		{&f.ctxCreate, "cuCtxCreate_v2"}, {&f.ctxDestroy, "cuCtxDestroy_v2"}, {&f.ctxSetCurrent, "cuCtxSetCurrent"},
		{&f.streamCreate, "cuStreamCreate"}, {&f.streamQuery, "cuStreamQuery"},
		{&f.writeValue, "cuStreamWriteValue64_v2"},
		{&f.memAllocAsync, "cuMemAllocAsync"}, {&f.memFreeAsync, "cuMemFreeAsync"},
		{&f.memsetD8Async, "cuMemsetD8Async"},
		{&f.memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"}, {&f.memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
		{&f.memcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
		{&f.memHostRegister, "cuMemHostRegister_v2"}, {&f.memHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"},
		{&f.moduleLoadData, "cuModuleLoadData"},
		{&f.moduleGetFunction, "cuModuleGetFunction"}, {&f.launchKernel, "cuLaunchKernel"},
		{&f.linkCreate, "cuLinkCreate_v2"}, {&f.linkAddData, "cuLinkAddData_v2"},
		{&f.linkComplete, "cuLinkComplete"}, {&f.linkDestroy, "cuLinkDestroy"},
		{&f.deviceGetAttribute, "cuDeviceGetAttribute"}, {&f.ctxGetLimit, "cuCtxGetLimit"},
		{&f.funcGetAttribute, "cuFuncGetAttribute"},
	}
	for _, s := range syms {
		if *s.p, err = purego.Dlsym(h, s.name); err != nil {
			return nil, fmt.Errorf("loading the CUDA driver %s: %s: %w (driver too old?)", path, s.name, err)
		}
	}
	return l, nil
}

// Flags of the driver API.
const (
	cuStreamNonBlocking     = 0x1
	cuMemHostRegisterPort   = 0x1
	cuMemHostRegisterDevMap = 0x2
	cuDeviceNameMax         = 256
	cuJitInputPTX           = 1 // CUjitInputType CU_JIT_INPUT_PTX
	cuLimitStackSize        = 0 // CUlimit CU_LIMIT_STACK_SIZE
	cuFuncLocalSizeBytes    = 3 // CUfunction_attribute CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
)

// A pointer the driver writes through is converted to uintptr in the
// SyscallN call itself, never in a helper: SyscallN is go:uintptrescapes,
// which keeps what such an argument points to alive and in place for the
// call only where the conversion is written in its argument list (a
// variable left on the stack could move before the driver writes it).

func (l *libcuda) Init() error {
	r, _, _ := purego.SyscallN(l.fn.init, 0)
	return check(r)
}

func (l *libcuda) DeviceGet(ordinal int) (int32, error) {
	var d int32
	r, _, _ := purego.SyscallN(l.fn.deviceGet, uintptr(unsafe.Pointer(&d)), uintptr(ordinal))
	return d, check(r)
}

func (l *libcuda) DeviceName(dev int32) (string, error) {
	return deviceString(l.fn.deviceGetName, cuDeviceNameMax, dev)
}

// deviceString calls a driver function of the shape fn(char *s, int len,
// CUdevice dev), cuDeviceGetName's and cuDeviceGetPCIBusId's, with a buffer
// of max bytes, and returns what it wrote up to the NUL.
func deviceString(fn uintptr, max int, dev int32) (string, error) {
	buf := make([]byte, max)
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(dev))
	if err := check(r); err != nil {
		return "", err
	}
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf), nil
}

func (l *libcuda) DeviceTotalMem(dev int32) (uint64, error) {
	var n uint64
	r, _, _ := purego.SyscallN(l.fn.deviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(dev))
	return n, check(r)
}

func (l *libcuda) DeviceAttribute(dev int32, attr int) (int32, error) {
	var v int32
	r, _, _ := purego.SyscallN(l.fn.deviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(dev))
	return v, check(r)
}

func (l *libcuda) CtxStackSize() (uint64, error) {
	var n uint64
	r, _, _ := purego.SyscallN(l.fn.ctxGetLimit, uintptr(unsafe.Pointer(&n)), cuLimitStackSize)
	return n, check(r)
}

func (l *libcuda) FuncLocalSize(f cuFunction) (uint64, error) {
	var n int32
	r, _, _ := purego.SyscallN(l.fn.funcGetAttribute, uintptr(unsafe.Pointer(&n)), cuFuncLocalSizeBytes, uintptr(f))
	if err := check(r); err != nil {
		return 0, err
	}
	return uint64(max(n, 0)), nil
}

// cuPCIBusIDMax fits "dddd:bb:dd.f" and more (the driver writes 13 bytes
// with the NUL).
const cuPCIBusIDMax = 64

func (l *libcuda) DevicePCIBusID(dev int32) (string, error) {
	return deviceString(l.fn.deviceGetPCIBusID, cuPCIBusIDMax, dev)
}

func (l *libcuda) CtxCreate(dev int32) (cuContext, error) {
	var c cuContext
	// cuCtxCreate_v2 makes the new context current on this thread; the
	// caller holds the thread (inCtx) and sets what it needs.
	r, _, _ := purego.SyscallN(l.fn.ctxCreate, uintptr(unsafe.Pointer(&c)), 0, uintptr(dev))
	return c, check(r)
}

func (l *libcuda) CtxDestroy(c cuContext) error {
	r, _, _ := purego.SyscallN(l.fn.ctxDestroy, uintptr(c))
	return check(r)
}

func (l *libcuda) CtxSetCurrent(c cuContext) error {
	r, _, _ := purego.SyscallN(l.fn.ctxSetCurrent, uintptr(c))
	return check(r)
}

func (l *libcuda) StreamCreate() (cuStream, error) {
	var s cuStream
	r, _, _ := purego.SyscallN(l.fn.streamCreate, uintptr(unsafe.Pointer(&s)), cuStreamNonBlocking)
	return s, check(r)
}

func (l *libcuda) StreamQuery(s cuStream) error {
	r, _, _ := purego.SyscallN(l.fn.streamQuery, uintptr(s))
	return check(r)
}

func (l *libcuda) WriteValue64(s cuStream, addr devptr, v uint64) error {
	r, _, _ := purego.SyscallN(l.fn.writeValue, uintptr(s), uintptr(addr), uintptr(v), 0)
	return check(r)
}

func (l *libcuda) MemAllocAsync(size uint64, s cuStream) (devptr, error) {
	var p devptr
	r, _, _ := purego.SyscallN(l.fn.memAllocAsync, uintptr(unsafe.Pointer(&p)), uintptr(size), uintptr(s))
	return p, check(r)
}

func (l *libcuda) MemFreeAsync(p devptr, s cuStream) error {
	r, _, _ := purego.SyscallN(l.fn.memFreeAsync, uintptr(p), uintptr(s))
	return check(r)
}

func (l *libcuda) MemsetD8Async(p devptr, v byte, n uint64, s cuStream) error {
	r, _, _ := purego.SyscallN(l.fn.memsetD8Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s))
	return check(r)
}

func (l *libcuda) MemcpyHtoDAsync(dst devptr, src unsafe.Pointer, n uint64, s cuStream) error {
	r, _, _ := purego.SyscallN(l.fn.memcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
	return check(r)
}

func (l *libcuda) MemcpyDtoHAsync(dst unsafe.Pointer, src devptr, n uint64, s cuStream) error {
	r, _, _ := purego.SyscallN(l.fn.memcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
	return check(r)
}

func (l *libcuda) MemcpyDtoDAsync(dst, src devptr, n uint64, s cuStream) error {
	r, _, _ := purego.SyscallN(l.fn.memcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
	return check(r)
}

func (l *libcuda) MemHostGetDevicePointer(p unsafe.Pointer) (devptr, error) {
	var d devptr
	r, _, _ := purego.SyscallN(l.fn.memHostGetDevicePointer, uintptr(unsafe.Pointer(&d)), uintptr(p), 0)
	return d, check(r)
}

func (l *libcuda) MemHostRegister(p unsafe.Pointer, size uint64) error {
	r, _, _ := purego.SyscallN(l.fn.memHostRegister, uintptr(p), uintptr(size), cuMemHostRegisterPort|cuMemHostRegisterDevMap)
	return check(r)
}

func (l *libcuda) ModuleLoadData(image []byte) (cuModule, error) {
	var m cuModule
	r, _, _ := purego.SyscallN(l.fn.moduleLoadData, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&image[0])))
	runtime.KeepAlive(image)
	return m, check(r)
}

// LinkPTX runs the driver's linker on ptx alone: it compiles it for the
// current context's device, as cuModuleLoadData would, and returns the
// cubin (a copy: the linker's own goes with its state).
func (l *libcuda) LinkPTX(ptx []byte) ([]byte, error) {
	var st uintptr
	r, _, _ := purego.SyscallN(l.fn.linkCreate, 0, 0, 0, uintptr(unsafe.Pointer(&st)))
	if err := check(r); err != nil {
		return nil, err
	}
	defer purego.SyscallN(l.fn.linkDestroy, st)
	name := []byte("module\x00")
	r, _, _ = purego.SyscallN(l.fn.linkAddData, st, cuJitInputPTX, uintptr(unsafe.Pointer(&ptx[0])), uintptr(len(ptx)),
		uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
	runtime.KeepAlive(ptx)
	runtime.KeepAlive(name)
	if err := check(r); err != nil {
		return nil, err
	}
	var out *byte
	var n uint64
	r, _, _ = purego.SyscallN(l.fn.linkComplete, st, uintptr(unsafe.Pointer(&out)), uintptr(unsafe.Pointer(&n)))
	if err := check(r); err != nil {
		return nil, err
	}
	if out == nil || n == 0 {
		return nil, cudaErrorInvalidImage
	}
	return bytes.Clone(unsafe.Slice(out, n)), nil
}

func (l *libcuda) ModuleGetFunction(m cuModule, name string) (cuFunction, error) {
	cname := append([]byte(name), 0)
	var f cuFunction
	r, _, _ := purego.SyscallN(l.fn.moduleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&cname[0])))
	runtime.KeepAlive(cname)
	return f, check(r)
}

// launchExtra is cuLaunchKernel's "extra" list for a packed parameter
// buffer. It lives on the heap (it holds pointers the driver follows) and is
// kept alive across the call.
type launchExtra struct {
	list [5]uintptr
	size uintptr
	args []byte
}

// The "extra" keys (CU_LAUNCH_PARAM_*).
const (
	launchParamEnd           = 0x0
	launchParamBufferPointer = 0x1
	launchParamBufferSize    = 0x2
)

func (l *libcuda) LaunchKernel(f cuFunction, grid, block [3]uint32, sharedMem uint32, s cuStream, args []byte) error {
	e := &launchExtra{size: uintptr(len(args)), args: args}
	var list *[5]uintptr // nil: no parameters
	if len(args) > 0 {
		e.list = [5]uintptr{
			launchParamBufferPointer, uintptr(unsafe.Pointer(&e.args[0])),
			launchParamBufferSize, uintptr(unsafe.Pointer(&e.size)),
			launchParamEnd,
		}
		list = &e.list
	}
	// list converted in the call: e goes to the heap (go:uintptrescapes),
	// where the addresses its list holds stay put.
	r, _, _ := purego.SyscallN(l.fn.launchKernel, uintptr(f),
		uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
		uintptr(block[0]), uintptr(block[1]), uintptr(block[2]),
		uintptr(sharedMem), uintptr(s), 0, uintptr(unsafe.Pointer(list)))
	runtime.KeepAlive(e)
	return check(r)
}
