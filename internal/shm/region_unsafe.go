package shm

import (
	"sync/atomic"
	"unsafe"
)

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func load32(b []byte, off uint64) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off])))
}

func store32(b []byte, off uint64, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), v)
}

// put64 is a plain store: no barrier, no lock prefix.
func put64(b []byte, off uint64, v uint64) {
	*(*uint64)(unsafe.Pointer(&b[off])) = v
}

func load64(b []byte, off uint64) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[off])))
}

func store64(b []byte, off uint64, v uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[off])), v)
}

func cas32(b []byte, off uint64, old, new uint32) bool {
	return atomic.CompareAndSwapUint32((*uint32)(unsafe.Pointer(&b[off])), old, new)
}

func and32(b []byte, off uint64, mask uint32) {
	atomic.AndUint32((*uint32)(unsafe.Pointer(&b[off])), mask)
}

func words64(b []byte, off, n uint64) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[off])), n)
}

func cas64(b []byte, off uint64, old, new uint64) bool {
	return atomic.CompareAndSwapUint64((*uint64)(unsafe.Pointer(&b[off])), old, new)
}
