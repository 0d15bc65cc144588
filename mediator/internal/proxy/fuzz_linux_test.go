package proxy

import (
	"bytes"
	"encoding/binary"
	"math/big"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

func FuzzHeapRange(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint16(16))
	f.Add(uint64(1<<63), uint64(1<<63), uint16(16))
	f.Add(uint64(16), uint64(0), uint16(16))
	f.Fuzz(func(t *testing.T, off, n uint64, size uint16) {
		heap := make([]byte, size)
		b, e := heapRange(heap, off, n)
		end := new(big.Int).Add(new(big.Int).SetUint64(off), new(big.Int).SetUint64(n))
		inside := end.Cmp(big.NewInt(int64(size))) <= 0
		switch {
		case inside && (e != 0 || uint64(len(b)) != n || n > 0 && &b[0] != &heap[off]):
			t.Fatalf("heapRange(%d, %d) in %d bytes = %d bytes, %d", off, n, size, len(b), e)
		case !inside && e != abi.ErrnoFAULT:
			t.Fatalf("heapRange(%d, %d) in %d bytes = %d, want EFAULT", off, n, size, e)
		}
	})
}

func FuzzHeapPath(f *testing.F) {
	f.Add([]byte("a/b\x00"), uint64(0))
	f.Add([]byte("abc"), uint64(1))
	f.Add(bytes.Repeat([]byte("a"), abi.PathMax+1), uint64(0))
	f.Fuzz(func(t *testing.T, heap []byte, off uint64) {
		p, e := heapPath(heap, off)
		if off >= uint64(len(heap)) {
			if e != abi.ErrnoFAULT {
				t.Fatalf("offset %d of %d: %d", off, len(heap), e)
			}
			return
		}
		rest := heap[off:]
		i := bytes.IndexByte(rest, 0)
		switch {
		case i >= 0 && i < abi.PathMax:
			if e != 0 || p != string(rest[:i]) {
				t.Fatalf("path %q, %d; want %q", p, e, rest[:i])
			}
		case len(rest) >= abi.PathMax:
			if e != abi.ErrnoNAMETOOLONG {
				t.Fatalf("no NUL in %d bytes: %d, want ENAMETOOLONG", abi.PathMax, e)
			}
		default:
			if e != abi.ErrnoFAULT {
				t.Fatalf("heap ends before a NUL: %d, want EFAULT", e)
			}
		}
	})
}

func FuzzHeapSockaddr(f *testing.F) {
	f.Add(uint64(0), uint64(16))
	f.Add(uint64(100), uint64(200))
	f.Fuzz(func(t *testing.T, off, n uint64) {
		heap := make([]byte, 256)
		sa, e := heapSockaddr(heap, off, n)
		switch {
		case n > maxSockaddr:
			if e != abi.ErrnoINVAL {
				t.Fatalf("length %d: %d, want EINVAL", n, e)
			}
		case off > 256 || n > 256-off:
			if e != abi.ErrnoFAULT {
				t.Fatalf("%d+%d: %d, want EFAULT", off, n, e)
			}
		case e != 0 || uint64(len(sa)) != n:
			t.Fatalf("%d+%d: %d bytes, %d", off, n, len(sa), e)
		}
	})
}

// fuzzHeap is the heap FuzzServe serves: the first half holds fixed paths
// and is never written (path arguments point there), the second half is
// where calls write (buffer arguments point there). Without a sandbox the
// calls run on the host, so the fuzzer cannot make a call write a path like
// "/etc" that a later call would use; nor can it touch the network
// (connect and sendto become null) or block (sockets are non-blocking).
const fuzzHeap = 64 << 10

var fuzzPaths = []string{"f", "d", "d/g", ".", "..", "f/", "", "nope"}

// fuzzRequest turns fuzz bytes into a request with arbitrary arguments,
// steered as fuzzHeap says.
func fuzzRequest(p []byte) proxyproto.Request {
	var r proxyproto.Request
	nr := binary.LittleEndian.Uint16(p)
	if int(nr)%4 != 0 { // mostly ABI calls
		nr = abi.Calls[int(nr)%len(abi.Calls)].Number
	}
	r.Number, r.Flags, r.Context = nr, p[2]&abi.SysFlagFastcall, p[3]%4
	for i := range r.Args {
		r.Args[i] = binary.LittleEndian.Uint64(p[8+8*i:])
	}
	r.Aux = uint64(p[4])
	half := uint64(fuzzHeap / 2)
	switch nr {
	case abi.SysConnect, abi.SysSendto:
		r.Number = abi.SysNull
	case abi.SysSocket:
		r.Args[1] |= unix.SOCK_NONBLOCK
	case abi.SysRecvfrom:
		r.Args[3] |= unix.MSG_DONTWAIT
	case abi.SysMmap, abi.SysMunmap, abi.SysMadvise:
		if r.Args[0] < fuzzHeap {
			r.Args[0] = half + r.Args[0]%half
		}
	}
	if c := abi.LookupCall(nr); c != nil {
		for i, k := range c.Args {
			switch {
			case k == abi.ArgPath && r.Args[i] < fuzzHeap:
				r.Args[i] = uint64(fuzzPathOff[int(r.Args[i])%len(fuzzPathOff)])
			case (k == abi.ArgBuf || k == abi.ArgHeapOut) && r.Args[i] < fuzzHeap:
				r.Args[i] = half + r.Args[i]%half
			}
		}
	}
	return r
}

var fuzzPathOff = func() []int {
	offs := make([]int, len(fuzzPaths))
	for i := range fuzzPaths {
		offs[i] = 64 * i
	}
	return offs
}()

func FuzzServe(f *testing.F) {
	seed := func(nr uint16, args ...uint64) []byte {
		b := make([]byte, 56)
		binary.LittleEndian.PutUint16(b, nr)
		for i, a := range args {
			binary.LittleEndian.PutUint64(b[8+8*i:], a)
		}
		return b
	}
	f.Add(seed(abi.SysOpenat, atFDCWD, 0, unix.O_CREAT|unix.O_RDWR, 0o644))
	f.Add(append(seed(abi.SysOpenat, atFDCWD, 0, unix.O_RDWR, 0), seed(abi.SysRead, 3, 100, 10)...))
	f.Add(seed(abi.SysContextRegister, 0, 0, 0o22, 3))
	f.Add(seed(abi.SysMmap, 0, 100, 0, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHarness(t, fuzzHeap)
		for i, p := range fuzzPaths {
			h.path(uint64(fuzzPathOff[i]), p)
		}
		fixed := bytes.Clone(h.heap[:fuzzHeap/2])
		var reqs []proxyproto.Request
		for len(data) >= 56 && len(reqs) < 64 {
			reqs = append(reqs, fuzzRequest(data[:56]))
			data = data[56:]
		}
		if len(reqs) == 0 {
			return
		}
		// batch fails the test unless every request is answered once.
		res, _ := h.batch(reqs)
		for i, r := range res {
			if r.Errno > 133 || r.Errno != 0 && r.Ret != -1 {
				t.Fatalf("request %+v: result %+v", reqs[i], r)
			}
		}
		if !bytes.Equal(h.heap[:fuzzHeap/2], fixed) {
			t.Fatalf("a call wrote the fixed path region")
		}
	})
}
