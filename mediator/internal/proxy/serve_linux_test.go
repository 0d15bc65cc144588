package proxy

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

const (
	heapSize = 1 << 20
	pathA    = 0       // path scratch
	pathB    = 8 << 10 // second path
	bufOff   = 64 << 10
	outOff   = 512 << 10
)

const atFDCWD = uint64(1<<64 - 100) // AT_FDCWD as a u64 argument

func TestTableCoversABI(t *testing.T) {
	for _, c := range abi.Calls {
		h := lookup(c.Number)
		if h.where == nowhere || h.name != c.Name {
			t.Errorf("call %d %q: handler %q where %d", c.Number, c.Name, h.name, h.where)
		}
		if h.where == inContext && h.fn == nil {
			t.Errorf("call %q served in a context has no function", c.Name)
		}
	}
	if len(calls) != len(abi.Calls) {
		t.Errorf("table has %d calls, the ABI %d", len(calls), len(abi.Calls))
	}
	if h := lookup(0xffff); h.where != nowhere {
		t.Errorf("unknown number has handler %+v", h)
	}
}

func TestServeBasics(t *testing.T) {
	h := newHarness(t, heapSize)
	for _, tc := range []struct {
		name string
		ctx  uint8
		nr   uint16
		args []uint64
		want abi.Errno
	}{
		{"null", 0, abi.SysNull, nil, 0},
		{"null in unknown context", 9, abi.SysNull, nil, 0},
		{"unknown call", 0, 0x3ff, nil, abi.ErrnoNOSYS},
		{"linux call not in the ABI", 0, 59 /* execve */, nil, abi.ErrnoNOSYS},
		{"fastcall revoke reaches the proxy", 0, abi.SysFastcallRevoke, []uint64{1}, abi.ErrnoINVAL},
		{"unregistered context", 7, abi.SysClose, []uint64{100}, abi.ErrnoSRCH},
		{"context 255 unregistered", 255, abi.SysOpenat, []uint64{atFDCWD, 0}, abi.ErrnoSRCH},
		{"close of an inherited descriptor", 0, abi.SysClose, []uint64{0}, abi.ErrnoBADF},
		{"read of stdin", 0, abi.SysRead, []uint64{0, bufOff, 1}, abi.ErrnoBADF},
		{"close of a bad descriptor", 0, abi.SysClose, []uint64{1 << 20}, abi.ErrnoBADF},
		{"read past the heap", 0, abi.SysRead, []uint64{100, heapSize - 1, 2}, abi.ErrnoFAULT},
		{"read with overflowing range", 0, abi.SysRead, []uint64{100, 1 << 63, 1 << 63}, abi.ErrnoFAULT},
		{"path offset past the heap", 0, abi.SysOpenat, []uint64{atFDCWD, heapSize}, abi.ErrnoFAULT},
		{"fstat buffer past the heap", 0, abi.SysFstat, []uint64{100, heapSize - StatSize + 1}, abi.ErrnoFAULT},
		{"clock_gettime past the heap", 0, abi.SysClockGet, []uint64{1, heapSize - 15}, abi.ErrnoFAULT},
		{"clock_gettime bad clock", 0, abi.SysClockGet, []uint64{1000, outOff}, abi.ErrnoINVAL},
		{"getrusage children", 0, abi.SysGetrusage, []uint64{uint64(1<<64 - 1), outOff}, abi.ErrnoINVAL},
		{"socket netlink", 0, abi.SysSocket, []uint64{unix.AF_NETLINK, unix.SOCK_RAW, 0}, abi.Errno(unix.EAFNOSUPPORT)},
		{"connect long address", 0, abi.SysConnect, []uint64{100, bufOff, maxSockaddr + 1}, abi.ErrnoINVAL},
		{"unregister default context", 0, abi.SysContextUnregister, []uint64{0}, abi.ErrnoINVAL},
		{"unregister unknown context", 0, abi.SysContextUnregister, []uint64{42}, abi.ErrnoSRCH},
		{"unregister id past 255", 0, abi.SysContextUnregister, []uint64{256}, abi.ErrnoSRCH},
		{"register uid -1", 0, abi.SysContextRegister, []uint64{1<<32 - 1, 0, 0, pathA}, abi.ErrnoINVAL},
		{"register bad umask", 0, abi.SysContextRegister, []uint64{0, 0, 0o1000, pathA}, abi.ErrnoINVAL},
		{"register cwd past the heap", 0, abi.SysContextRegister, []uint64{0, 0, 0, heapSize}, abi.ErrnoFAULT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ret, e := h.call(tc.ctx, tc.nr, tc.args...)
			wantErrno(t, tc.name, e, tc.want)
			if e != 0 && ret != -1 {
				t.Errorf("failed call returned %d, want -1", ret)
			}
		})
	}
	// A fastcall slot reaching the proxy.
	r := proxyproto.Request{Number: 1, Flags: abi.SysFlagFastcall}
	res, _ := h.batch([]proxyproto.Request{r})
	wantErrno(t, "fastcall slot", res[0].Errno, abi.ErrnoINVAL)
}

func TestPaths(t *testing.T) {
	h := newHarness(t, heapSize)
	deep := ""
	for len(deep) < abi.PathMax-1 {
		deep += "a/"
	}
	deep = deep[:abi.PathMax-1] // 4095 bytes and the NUL: the longest path
	for _, tc := range []struct {
		name  string
		setup func() uint64 // returns the path's offset
		want  abi.Errno
	}{
		{"missing file", func() uint64 { return h.path(pathA, "nope") }, abi.ErrnoNOENT},
		{"longest path reaches the kernel", func() uint64 { return h.path(pathA, deep) }, abi.ErrnoNOENT},
		{"one byte too long", func() uint64 {
			h.path(pathA, deep+"a")
			return pathA
		}, abi.ErrnoNAMETOOLONG},
		{"unterminated at the heap's end", func() uint64 {
			copy(h.heap[heapSize-3:], "abc")
			return heapSize - 3
		}, abi.ErrnoFAULT},
		{"empty", func() uint64 { return h.path(pathA, "") }, abi.ErrnoNOENT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off := tc.setup()
			_, e := h.call(0, abi.SysOpenat, atFDCWD, off, unix.O_RDONLY, 0)
			wantErrno(t, tc.name, e, tc.want)
		})
	}
}

func TestFiles(t *testing.T) {
	h := newHarness(t, heapSize)
	fd := uint64(h.must(0, abi.SysOpenat, atFDCWD, h.path(pathA, "f"), unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o640))
	copy(h.heap[bufOff:], "hello, world")
	if n := h.must(0, abi.SysWrite, fd, bufOff, 12); n != 12 {
		t.Fatalf("write = %d", n)
	}
	if n := h.must(0, abi.SysPwrite64, fd, bufOff, 5, 100); n != 5 {
		t.Fatalf("pwrite64 = %d", n)
	}
	if got, _ := os.ReadFile(filepath.Join(h.dir, "f")); len(got) != 105 || string(got[100:]) != "hello" {
		t.Fatalf("file holds %q", got)
	}
	if off := h.must(0, abi.SysLseek, fd, 7, unix.SEEK_SET); off != 7 {
		t.Fatalf("lseek = %d", off)
	}
	if n := h.must(0, abi.SysRead, fd, outOff, 5); n != 5 || string(h.heap[outOff:outOff+5]) != "world" {
		t.Fatalf("read = %d %q", n, h.heap[outOff:outOff+5])
	}
	if n := h.must(0, abi.SysPread64, fd, outOff, 5, 0); n != 5 || string(h.heap[outOff:outOff+5]) != "hello" {
		t.Fatalf("pread64 = %d", n)
	}
	h.must(0, abi.SysFstat, fd, outOff)
	st := h.heap[outOff : outOff+StatSize]
	if size, mode := le.Uint64(st[48:]), le.Uint32(st[24:]); size != 105 || mode&0o7777 != 0o640 || mode&unix.S_IFMT != unix.S_IFREG {
		t.Errorf("fstat size %d mode %o", size, mode)
	}
	var want unix.Stat_t
	if err := unix.Stat(filepath.Join(h.dir, "f"), &want); err != nil || le.Uint64(st[8:]) != want.Ino || le.Uint64(st[88:]) != uint64(want.Mtim.Sec) {
		t.Errorf("fstat inode %d mtime %d, want %d %d", le.Uint64(st[8:]), le.Uint64(st[88:]), want.Ino, want.Mtim.Sec)
	}
	h.must(0, abi.SysClose, fd)
	_, e := h.call(0, abi.SysClose, fd)
	wantErrno(t, "second close", e, abi.ErrnoBADF)
	_, e = h.call(0, abi.SysOpenat, atFDCWD, h.path(pathA, "f"), unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o640)
	wantErrno(t, "O_EXCL", e, abi.ErrnoEXIST)

	h.must(0, abi.SysMkdirat, atFDCWD, h.path(pathA, "d"), 0o755)
	dfd := uint64(h.must(0, abi.SysOpenat, atFDCWD, h.path(pathA, "d"), unix.O_RDONLY|unix.O_DIRECTORY, 0))
	h.must(0, abi.SysClose, uint64(h.must(0, abi.SysOpenat, dfd, h.path(pathA, "inner"), unix.O_CREAT|unix.O_WRONLY, 0o600)))
	n := h.must(0, abi.SysGetdents64, dfd, outOff, 4096)
	names := direntNames(h.heap[outOff : outOff+uint64(n)])
	if len(names) != 3 || !names["inner"] || !names["."] {
		t.Errorf("getdents64 names %v", names)
	}
	_, e = h.call(0, abi.SysUnlinkat, dfd, h.path(pathA, "inner"), unix.AT_REMOVEDIR)
	wantErrno(t, "rmdir of a file", e, abi.ErrnoNOTDIR)
	h.must(0, abi.SysUnlinkat, dfd, h.path(pathA, "inner"), 0)
	h.must(0, abi.SysClose, dfd)
	h.must(0, abi.SysUnlinkat, atFDCWD, h.path(pathA, "d"), unix.AT_REMOVEDIR)
	if _, err := os.Stat(filepath.Join(h.dir, "d")); !os.IsNotExist(err) {
		t.Errorf("d still there: %v", err)
	}
}

func direntNames(b []byte) map[string]bool {
	names := map[string]bool{}
	for len(b) >= 19 {
		reclen := int(le.Uint16(b[16:]))
		name := b[19:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		names[string(name)] = true
		b = b[reclen:]
	}
	return names
}

func TestMemory(t *testing.T) {
	h := newHarness(t, heapSize)
	if err := os.WriteFile(filepath.Join(h.dir, "m"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd := uint64(h.must(0, abi.SysOpenat, atFDCWD, h.path(pathA, "m"), unix.O_RDONLY, 0))
	fill := func() {
		for i := range h.heap[outOff : outOff+64] {
			h.heap[outOff+uint64(i)] = 0xee
		}
	}
	fill()
	if got := h.must(0, abi.SysMmap, outOff, 16, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_FIXED, fd, 0); got != outOff {
		t.Fatalf("mmap = %d", got)
	}
	if got := string(h.heap[outOff : outOff+17]); got != "0123456789\x00\x00\x00\x00\x00\x00\xee" {
		t.Errorf("file mapping holds %q", got)
	}
	fill()
	h.must(0, abi.SysMmap, outOff, 8, 0, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, uint64(1<<64-1), 0)
	if h.heap[outOff] != 0 || h.heap[outOff+7] != 0 || h.heap[outOff+8] != 0xee {
		t.Errorf("anonymous mapping: % x", h.heap[outOff:outOff+9])
	}
	fill()
	h.must(0, abi.SysMunmap, outOff, 4)
	h.must(0, abi.SysMadvise, outOff+4, 4, unix.MADV_DONTNEED)
	h.must(0, abi.SysMadvise, outOff+8, 4, unix.MADV_WILLNEED)
	if h.heap[outOff+7] != 0 || h.heap[outOff+8] != 0xee {
		t.Errorf("munmap/madvise: % x", h.heap[outOff:outOff+9])
	}
	for _, tc := range []struct {
		name string
		nr   uint16
		args []uint64
		want abi.Errno
	}{
		{"mmap empty", abi.SysMmap, []uint64{outOff, 0, 0, unix.MAP_PRIVATE | unix.MAP_ANONYMOUS}, abi.ErrnoINVAL},
		{"mmap past the heap", abi.SysMmap, []uint64{heapSize - 4, 8, 0, unix.MAP_PRIVATE | unix.MAP_ANONYMOUS}, abi.ErrnoFAULT},
		{"mmap shared file", abi.SysMmap, []uint64{outOff, 8, 0, unix.MAP_SHARED, fd, 0}, abi.ErrnoINVAL},
		{"mmap no type", abi.SysMmap, []uint64{outOff, 8, 0, unix.MAP_ANONYMOUS}, abi.ErrnoINVAL},
		{"mmap unaligned offset", abi.SysMmap, []uint64{outOff, 8, 0, unix.MAP_PRIVATE, fd, 1}, abi.ErrnoINVAL},
		{"mmap bad fd", abi.SysMmap, []uint64{outOff, 8, 0, unix.MAP_PRIVATE, 999, 0}, abi.ErrnoBADF},
		{"munmap empty", abi.SysMunmap, []uint64{outOff, 0}, abi.ErrnoINVAL},
		{"munmap past the heap", abi.SysMunmap, []uint64{heapSize, 1}, abi.ErrnoFAULT},
		{"madvise past the heap", abi.SysMadvise, []uint64{1, heapSize, unix.MADV_DONTNEED}, abi.ErrnoFAULT},
		{"madvise empty", abi.SysMadvise, []uint64{heapSize + 1, 0, unix.MADV_DONTNEED}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, e := h.call(0, tc.nr, tc.args...)
			wantErrno(t, tc.name, e, tc.want)
		})
	}
}

func TestTimeAndUsage(t *testing.T) {
	h := newHarness(t, heapSize)
	h.must(0, abi.SysClockGet, unix.CLOCK_MONOTONIC, outOff)
	var now unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &now)
	if sec := int64(le.Uint64(h.heap[outOff:])); sec <= 0 || sec > now.Sec {
		t.Errorf("clock_gettime seconds %d, now %d", sec, now.Sec)
	}
	if _, e := h.callAux(0, abi.SysGetrusage, 1_500_000_000, 0, outOff); e != 0 {
		t.Fatalf("getrusage: %d", e)
	}
	ru := h.heap[outOff : outOff+RusageSize]
	if sec, usec := le.Uint64(ru[0:]), le.Uint64(ru[8:]); sec != 1 || usec != 500_000 {
		t.Errorf("ru_utime %d.%06d, want the GPU time 1.500000", sec, usec)
	}
	if le.Uint64(ru[16:]) == 0 && le.Uint64(ru[24:]) == 0 {
		t.Errorf("ru_stime is 0: the proxy's CPU time")
	}
}

func TestBatchesResults(t *testing.T) {
	h := newHarness(t, heapSize)
	reqs := make([]proxyproto.Request, 200)
	for i := range reqs {
		reqs[i] = proxyproto.Request{Number: abi.SysClockGet, Args: [6]uint64{unix.CLOCK_REALTIME, outOff}}
	}
	res, msgs := h.batch(reqs)
	for _, r := range res {
		if r.Errno != 0 {
			t.Fatalf("result %+v", r)
		}
	}
	if msgs != 1 {
		t.Errorf("200 results of one context came in %d datagrams, want 1", msgs)
	}
}
