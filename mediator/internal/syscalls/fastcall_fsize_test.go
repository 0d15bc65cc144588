package syscalls

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/internal/slotcall"
	"github.com/sluice-gpu/sluice/mediator/internal/proxy"
)

// newLimitedVM is newRealVM (an in-process proxy, no RLIMIT_FSIZE of its
// own) with the VM's file size limit set to limit.
func newLimitedVM(t *testing.T, limit uint64) *realVM {
	t.Helper()
	area, areaFD := mapShared(t, int(abi.SyscallAreaSize(64)))
	heap, _ := mapShared(t, 1<<20)
	v := &realVM{heap: heap, dir: t.TempDir()}
	var err error
	if v.guest, err = slotcall.New(area); err != nil {
		t.Fatal(err)
	}
	v.f, err = New(Spec{
		Name: "limited", Area: shm.New(area), Slots: 64, Heap: v.heap, GPUNs: func() uint64 { return 0 },
		Memfd: &Memfd{FD: areaFD}, MaxFileSize: limit,
		Start: func() (Proxy, error) {
			mine, theirs := seqpacketPair(t)
			ctx, cancel := context.WithCancel(context.Background())
			p := &inProcess{conn: mine, cancel: cancel, done: make(chan struct{})}
			go func() {
				defer close(p.done)
				defer theirs.Close()
				_ = proxy.Serve(ctx, theirs, v.heap, proxy.ServeConfig{Dir: v.dir})
			}()
			return p, nil
		},
	}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.f.Close() })
	return v
}

// fastcall registers op on fd (heap [heapOff, +n), file offset off) and runs
// it once.
func (v *realVM) fastcall(t *testing.T, op uint16, fd int64, heapOff, n, off uint64) slotcall.Result {
	t.Helper()
	num := v.call(t, 0, abi.SysFastcallRegister, uint64(op), uint64(fd), heapOff, n, off)
	if num.Errno != 0 {
		t.Fatalf("register: %+v", num)
	}
	res, err := v.guest.Call(1, slotcall.Request{Number: uint16(num.Ret), Flags: abi.SysFlagBlocking | abi.SysFlagFastcall})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (v *realVM) fileSize(t *testing.T, name string) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(v.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Fastcall writes, which sluiced runs outside the proxy's RLIMIT_FSIZE,
// obey the VM's file size limit as the proxy's own writes do: cut at it,
// EFBIG at or past it, and no SIGXFSZ (this test process would end).
func TestFastcallWritesObeyMaxFileSize(t *testing.T) {
	const limit = 10
	v := newLimitedVM(t, limit)
	copy(v.heap[1000:], "ABCDEFGH")
	fd := v.call(t, 0, abi.SysOpenat, atFDCWD, v.putString(0, "f"), unix.O_CREAT|unix.O_RDWR, 0o644)
	if fd.Errno != 0 {
		t.Fatalf("open: %+v", fd)
	}
	want := func(what string, got slotcall.Result, ret int64, errno abi.Errno, size int64) {
		t.Helper()
		if got.Ret != ret || got.Errno != errno {
			t.Errorf("%s: ret %d errno %s, want %d %s", what, got.Ret, got.Errno.Name(), ret, errno.Name())
		}
		if s := v.fileSize(t, "f"); s != size {
			t.Errorf("%s: file size %d, want %d", what, s, size)
		}
	}
	want("pwrite64 of 4 at 8", v.fastcall(t, abi.SysPwrite64, fd.Ret, 1000, 4, 8), 2, 0, limit)
	want("pwrite64 at the limit", v.fastcall(t, abi.SysPwrite64, fd.Ret, 1000, 4, limit), -1, abi.Errno(unix.EFBIG), limit)
	want("pwrite64 past the limit", v.fastcall(t, abi.SysPwrite64, fd.Ret, 1000, 1, 100), -1, abi.Errno(unix.EFBIG), limit)
	want("pwrite64 of 0 at the limit", v.fastcall(t, abi.SysPwrite64, fd.Ret, 1000, 0, limit), 0, 0, limit)
	if got, _ := os.ReadFile(filepath.Join(v.dir, "f")); string(got) != "\x00\x00\x00\x00\x00\x00\x00\x00AB" {
		t.Errorf("file holds %q", got)
	}

	// write lands at the fd's position, which the proxy's lseek moves.
	if r := v.call(t, 0, abi.SysLseek, uint64(fd.Ret), 7, 0); r.Ret != 7 {
		t.Fatalf("lseek: %+v", r)
	}
	want("write of 4 at 7", v.fastcall(t, abi.SysWrite, fd.Ret, 1000, 4, 0), 3, 0, limit)
	want("write at the limit", v.fastcall(t, abi.SysWrite, fd.Ret, 1000, 4, 0), -1, abi.Errno(unix.EFBIG), limit)
	if r := v.call(t, 0, abi.SysLseek, uint64(fd.Ret), 0, 1); r.Ret != limit {
		t.Errorf("position after the writes: %+v, want %d", r, limit)
	}

	// O_APPEND: pwrite64 lands at the end (Linux), whatever its offset.
	app := v.call(t, 0, abi.SysOpenat, atFDCWD, v.putString(0, "f"), unix.O_WRONLY|unix.O_APPEND, 0)
	if app.Errno != 0 {
		t.Fatalf("open O_APPEND: %+v", app)
	}
	want("O_APPEND pwrite64 at 0 of a full file", v.fastcall(t, abi.SysPwrite64, app.Ret, 1000, 1, 0), -1, abi.Errno(unix.EFBIG), limit)
	if r := v.call(t, 0, abi.SysOpenat, atFDCWD, v.putString(0, "g"), unix.O_CREAT|unix.O_WRONLY|unix.O_APPEND, 0o644); r.Errno == 0 {
		if err := os.WriteFile(filepath.Join(v.dir, "g"), []byte("12345678"), 0o644); err != nil {
			t.Fatal(err)
		}
		res := v.fastcall(t, abi.SysWrite, r.Ret, 1000, 4, 0)
		if res.Ret != 2 || res.Errno != 0 || v.fileSize(t, "g") != limit {
			t.Errorf("O_APPEND write of 4 to a file of 8: %+v, size %d; want 2, %d", res, v.fileSize(t, "g"), limit)
		}
	} else {
		t.Fatalf("open g: %+v", r)
	}

	// Reads are not limited.
	if res := v.fastcall(t, abi.SysPread64, fd.Ret, 2000, 4, 8); res.Ret != 2 || res.Errno != 0 {
		t.Errorf("pread64 across the limit: %+v, want 2", res)
	}
}

func TestFastcallWritesUnlimitedByDefault(t *testing.T) {
	v := newLimitedVM(t, 0)
	fd := v.call(t, 0, abi.SysOpenat, atFDCWD, v.putString(0, "f"), unix.O_CREAT|unix.O_RDWR, 0o644)
	if res := v.fastcall(t, abi.SysPwrite64, fd.Ret, 1000, 4, 1<<20); res.Ret != 4 || res.Errno != 0 {
		t.Fatalf("pwrite64 at 1 MiB without a limit: %+v", res)
	}
	if s := v.fileSize(t, "f"); s != 1<<20+4 {
		t.Fatalf("file size %d", s)
	}
}
