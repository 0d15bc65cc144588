package proxy

import (
	"bytes"

	"github.com/sluice-gpu/sluice/api/abi"
)

// heapRange returns heap[off:off+n], or EFAULT when the range is not inside
// the heap (checked without overflow). The slice is the guest's own memory:
// it may be handed to the kernel as a buffer, never trusted as data.
func heapRange(heap []byte, off, n uint64) ([]byte, abi.Errno) {
	if !(abi.Layout{HeapSize: uint64(len(heap))}).HeapRange(off, n) {
		return nil, abi.ErrnoFAULT
	}
	return heap[off : off+n : off+n], 0
}

// heapPath copies the NUL-terminated path at heap offset off out of the heap
// (the guest rewrites its memory concurrently: the copy is what is checked
// and used). A path runs at most abi.PathMax bytes with its NUL:
// ENAMETOOLONG past that, EFAULT when the heap ends before a NUL.
func heapPath(heap []byte, off uint64) (string, abi.Errno) {
	size := uint64(len(heap))
	if off >= size {
		return "", abi.ErrnoFAULT
	}
	var buf [abi.PathMax]byte
	n := copy(buf[:], heap[off:])
	i := bytes.IndexByte(buf[:n], 0)
	switch {
	case i >= 0:
		return string(buf[:i]), 0
	case n == abi.PathMax:
		return "", abi.ErrnoNAMETOOLONG
	default:
		return "", abi.ErrnoFAULT
	}
}

// maxSockaddr is sizeof(struct sockaddr_storage): a socket address argument
// is copied out of the heap and is at most this long (EINVAL past it, as
// Linux does).
const maxSockaddr = 128

// heapSockaddr copies a socket address of n bytes out of the heap.
func heapSockaddr(heap []byte, off, n uint64) ([]byte, abi.Errno) {
	if n > maxSockaddr {
		return nil, abi.ErrnoINVAL
	}
	b, e := heapRange(heap, off, n)
	if e != 0 {
		return nil, e
	}
	return bytes.Clone(b), 0
}
