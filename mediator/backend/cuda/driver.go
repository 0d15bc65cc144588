package cuda

import (
	"errors"
	"fmt"
	"unsafe"
)

// Handles the driver API hands out. They are opaque: only the driver that
// made one may interpret it.
type (
	cuContext  uintptr
	cuStream   uintptr
	cuModule   uintptr
	cuFunction uintptr
	devptr     uint64 // a device address (CUdeviceptr)
)

// driver is the part of the CUDA driver API this backend uses, in Go terms.
// A GPU worker makes one context and keeps it current on its thread; the
// context's end (CtxDestroy, or the worker process's) frees all in it.
// The real one (libcuda) is loaded at run time by purego (loader.go); the
// tests use a fake (fake_test.go). Calls that act on a context's objects
// need that context current on the calling OS thread (inCtx).
type driver interface {
	Init() error
	DeviceGet(ordinal int) (int32, error)
	DeviceName(dev int32) (string, error)
	DeviceTotalMem(dev int32) (uint64, error) // bytes
	DevicePCIBusID(dev int32) (string, error) // "0000:00:06.0", as the driver writes it
	// DeviceAttribute is one of the device's CUdevice_attribute values
	// (attrSMs, attrThreadsPerSM).
	DeviceAttribute(dev int32, attr int) (int32, error)

	CtxCreate(dev int32) (cuContext, error)
	CtxDestroy(ctx cuContext) error
	CtxSetCurrent(ctx cuContext) error
	// CtxStackSize is the current context's stack per thread, in bytes
	// (CU_LIMIT_STACK_SIZE): the local memory it holds for every thread the
	// device can run at once.
	CtxStackSize() (uint64, error)

	StreamCreate() (cuStream, error) // non-blocking: no implicit sync with the legacy stream
	// StreamQuery is nil when everything queued on s has run, errNotReady
	// while work is pending, and the context's error after a fault.
	StreamQuery(s cuStream) error
	// WriteValue64 queues a 64-bit store of v to addr on s (a stream memory
	// operation: it runs when s reaches it, without a kernel).
	WriteValue64(s cuStream, addr devptr, v uint64) error

	MemAllocAsync(size uint64, s cuStream) (devptr, error)
	MemFreeAsync(p devptr, s cuStream) error
	MemsetD8Async(p devptr, v byte, n uint64, s cuStream) error
	MemcpyHtoDAsync(dst devptr, src unsafe.Pointer, n uint64, s cuStream) error
	MemcpyDtoHAsync(dst unsafe.Pointer, src devptr, n uint64, s cuStream) error
	MemcpyDtoDAsync(dst, src devptr, n uint64, s cuStream) error

	// MemHostRegister page-locks existing host memory and maps it into the
	// current context's address space (for DMA and for kernels);
	// MemHostGetDevicePointer is its address there. Destroying the context
	// unregisters it.
	MemHostRegister(p unsafe.Pointer, size uint64) error
	MemHostGetDevicePointer(p unsafe.Pointer) (devptr, error)

	// ModuleLoadData loads image (PTX NUL terminated, or a cubin) into the
	// current context; it lives as long as the context.
	ModuleLoadData(image []byte) (cuModule, error)
	// LinkPTX compiles ptx (NUL terminated) for the current context's
	// device and returns the cubin, without loading it.
	LinkPTX(ptx []byte) ([]byte, error)
	ModuleGetFunction(m cuModule, name string) (cuFunction, error)
	// FuncLocalSize is the local memory one thread of f uses, in bytes
	// (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES).
	FuncLocalSize(f cuFunction) (uint64, error)
	// LaunchKernel launches f with its parameters packed in args (the
	// layout the kernel's parameter list gives them).
	LaunchKernel(f cuFunction, grid, block [3]uint32, sharedMem uint32, s cuStream, args []byte) error
}

// CUdevice_attribute values the backend reads.
const (
	attrSMs          = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrThreadsPerSM = 39 // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
)

// cuResult is a CUresult other than CUDA_SUCCESS.
type cuResult int32

// CUresult values this backend tells apart.
const (
	cudaErrorInvalidValue      cuResult = 1
	cudaErrorOutOfMemory       cuResult = 2
	cudaErrorNotInitialized    cuResult = 3
	cudaErrorNoDevice          cuResult = 100
	cudaErrorInvalidDevice     cuResult = 101
	cudaErrorInvalidImage      cuResult = 200
	cudaErrorInvalidContext    cuResult = 201
	cudaErrorNoBinaryForGPU    cuResult = 209
	cudaErrorInvalidPTX        cuResult = 218
	cudaErrorInvalidHandle     cuResult = 400
	cudaErrorNotFound          cuResult = 500
	cudaErrorNotReady          cuResult = 600
	cudaErrorIllegalAddress    cuResult = 700
	cudaErrorLaunchOutOfRes    cuResult = 701
	cudaErrorLaunchTimeout     cuResult = 702
	cudaErrorHostMemRegistered cuResult = 712
	cudaErrorLaunchFailed      cuResult = 719
	cudaErrorNotSupported      cuResult = 801
)

var resultNames = map[cuResult]string{
	cudaErrorInvalidValue:      "CUDA_ERROR_INVALID_VALUE",
	cudaErrorOutOfMemory:       "CUDA_ERROR_OUT_OF_MEMORY",
	cudaErrorNotInitialized:    "CUDA_ERROR_NOT_INITIALIZED",
	cudaErrorNoDevice:          "CUDA_ERROR_NO_DEVICE",
	cudaErrorInvalidDevice:     "CUDA_ERROR_INVALID_DEVICE",
	cudaErrorInvalidImage:      "CUDA_ERROR_INVALID_IMAGE",
	cudaErrorInvalidContext:    "CUDA_ERROR_INVALID_CONTEXT",
	cudaErrorNoBinaryForGPU:    "CUDA_ERROR_NO_BINARY_FOR_GPU",
	cudaErrorInvalidPTX:        "CUDA_ERROR_INVALID_PTX",
	cudaErrorInvalidHandle:     "CUDA_ERROR_INVALID_HANDLE",
	cudaErrorNotFound:          "CUDA_ERROR_NOT_FOUND",
	cudaErrorNotReady:          "CUDA_ERROR_NOT_READY",
	cudaErrorIllegalAddress:    "CUDA_ERROR_ILLEGAL_ADDRESS",
	cudaErrorLaunchOutOfRes:    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	cudaErrorLaunchTimeout:     "CUDA_ERROR_LAUNCH_TIMEOUT",
	cudaErrorHostMemRegistered: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	cudaErrorLaunchFailed:      "CUDA_ERROR_LAUNCH_FAILED",
	cudaErrorNotSupported:      "CUDA_ERROR_NOT_SUPPORTED",
}

func (r cuResult) Error() string {
	if n, ok := resultNames[r]; ok {
		return fmt.Sprintf("%s (%d)", n, int32(r))
	}
	return fmt.Sprintf("CUresult %d", int32(r))
}

// errNotReady is StreamQuery's "work pending".
var errNotReady error = cudaErrorNotReady

// check turns a CUresult into an error.
func check(r uintptr) error {
	if int32(r) == 0 {
		return nil
	}
	return cuResult(int32(r))
}

// resultOf is the CUresult in err's chain, or 0.
func resultOf(err error) cuResult {
	var r cuResult
	if errors.As(err, &r) {
		return r
	}
	return 0
}

// sticky reports whether err leaves its context unusable: a fault in a
// kernel (an illegal address or instruction, a trap, a launch failure). The
// VM's work on the GPU is over; other contexts go on.
func sticky(err error) bool {
	switch resultOf(err) {
	case cudaErrorIllegalAddress, cudaErrorLaunchTimeout, cudaErrorLaunchFailed,
		710, // CUDA_ERROR_ASSERT
		714, // CUDA_ERROR_HARDWARE_STACK_ERROR
		715, // CUDA_ERROR_ILLEGAL_INSTRUCTION
		716, // CUDA_ERROR_MISALIGNED_ADDRESS
		717, // CUDA_ERROR_INVALID_ADDRESS_SPACE
		718: // CUDA_ERROR_INVALID_PC
		return true
	}
	return false
}
