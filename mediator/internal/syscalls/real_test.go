package syscalls

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/internal/slotcall"
	"github.com/sluice-gpu/sluice/mediator/internal/proxy"
	"golang.org/x/sys/unix"
)

// inProcess is a proxy served by proxy.Serve in this process, without the
// sandbox: the forwarder and the serving code, really talking.
type inProcess struct {
	conn   *net.UnixConn
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *inProcess) Conn() *net.UnixConn    { return p.conn }
func (p *inProcess) CPUTime() time.Duration { return 0 }
func (p *inProcess) Pid() int               { return os.Getpid() }
func (p *inProcess) Close() error {
	p.cancel()
	err := p.conn.Close()
	<-p.done
	return err
}

// realVM is a VM's syscall area and heap served by a forwarder and an
// in-process proxy rooted at dir, with a guest-side slotcall.Area.
type realVM struct {
	f     *Forwarder
	guest *slotcall.Area
	heap  []byte
	dir   string
}

func newRealVM(tb testing.TB, slots int, cfg Config) *realVM {
	return newVM(tb, slots, cfg, "")
}

// newVM serves the VM with the proxy code in this process, or with the
// sluice-proxy binary bin (unsandboxed) when bin is set.
func newVM(tb testing.TB, slots int, cfg Config, bin string) *realVM {
	tb.Helper()
	return newVMWith(tb, slots, cfg, bin, nil)
}

// newVMWith is newVM with a change to the binary's start (set).
func newVMWith(tb testing.TB, slots int, cfg Config, bin string, set func(*proxy.StartConfig)) *realVM {
	tb.Helper()
	// Shared memory, as in production: the race detector does not watch
	// mappings, whose ordering goes through the slots' atomics and the
	// proxy's socket.
	area, areaFD := mapShared(tb, int(abi.SyscallAreaSize(slots)))
	heap, heapFD := mapShared(tb, 1<<20)
	v := &realVM{heap: heap, dir: tb.TempDir()}
	var err error
	start := func() (Proxy, error) {
		mine, theirs := seqpacketPair(tb)
		ctx, cancel := context.WithCancel(context.Background())
		p := &inProcess{conn: mine, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(p.done)
			defer theirs.Close()
			_ = proxy.Serve(ctx, theirs, v.heap, proxy.ServeConfig{Dir: v.dir})
		}()
		return p, nil
	}
	if bin != "" {
		start = func() (Proxy, error) {
			sc := proxy.StartConfig{Binary: bin, VM: "bench", Volume: v.dir, HeapFD: heapFD, HeapSize: uint64(len(heap)), NoSandbox: true}
			if set != nil {
				set(&sc)
			}
			p, err := proxy.Start(sc)
			if err != nil {
				return nil, err
			}
			return p.Handle(), nil
		}
	}
	if v.guest, err = slotcall.New(area); err != nil {
		tb.Fatal(err)
	}
	v.f, err = New(Spec{
		Name: "real", Area: shm.New(area), Slots: slots, Heap: v.heap, GPUNs: func() uint64 { return 7e9 },
		Memfd: &Memfd{FD: areaFD}, Start: start,
	}, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { v.f.Close() })
	return v
}

func (v *realVM) call(tb testing.TB, slot uint32, nr uint16, args ...uint64) slotcall.Result {
	tb.Helper()
	req := slotcall.Request{Number: nr, Flags: abi.SysFlagBlocking}
	copy(req.Args[:], args)
	res, err := v.guest.Call(slot, req)
	if err != nil {
		tb.Fatalf("call %d: %v", nr, err)
	}
	return res
}

func (v *realVM) putString(off uint64, s string) uint64 {
	copy(v.heap[off:], s+"\x00")
	return off
}

var atFDCWD = func() uint64 { v := int64(-100); return uint64(v) }()

func TestRealProxyServesFilesThroughTheSlots(t *testing.T) {
	v := newRealVM(t, 64, DefaultConfig())
	if err := os.WriteFile(filepath.Join(v.dir, "a.txt"), []byte("hello world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd := v.call(t, 0, abi.SysOpenat, atFDCWD, v.putString(0, "a.txt"), 0, 0)
	if fd.Errno != 0 || fd.Ret < 0 {
		t.Fatalf("openat: %+v", fd)
	}
	if r := v.call(t, 1, abi.SysPread64, uint64(fd.Ret), 4096, 5, 6); r.Ret != 5 || string(v.heap[4096:4101]) != "world" {
		t.Fatalf("pread64: %+v, heap %q", r, v.heap[4096:4101])
	}
	if r := v.call(t, 2, abi.SysPread64, uint64(fd.Ret), uint64(len(v.heap)-2), 5, 0); r.Errno != abi.ErrnoFAULT {
		t.Fatalf("pread64 past the heap: %+v, want EFAULT", r)
	}
	if r := v.call(t, 3, 0x3ff); r.Errno != abi.ErrnoNOSYS {
		t.Fatalf("unknown call: %+v, want ENOSYS", r)
	}
	if r := v.call(t, 4, abi.SysGetrusage, 0, 8192); r.Errno != 0 {
		t.Fatalf("getrusage: %+v", r)
	}
	// struct rusage: ru_utime (timeval) first; the VM's 7 s of GPU time.
	if sec := le64(v.heap[8192:]); sec != 7 {
		t.Fatalf("getrusage ru_utime.tv_sec = %d, want the VM's 7 s of GPU time", sec)
	}
	if r := v.call(t, 5, abi.SysClose, uint64(fd.Ret)); r.Errno != 0 {
		t.Fatalf("close: %+v", r)
	}
	if r := v.call(t, 5, abi.SysClose, uint64(fd.Ret)); r.Errno != abi.ErrnoBADF {
		t.Fatalf("second close: %+v, want EBADF", r)
	}
	// The proxy wrote the results into the slots itself; the forwarder
	// learns of them from the result ring, and counts every call once.
	s := settled(t, v.f)
	if s.Calls["openat"] != 1 || s.Calls["pread64"] != 2 || s.Errnos["EFAULT"] != 1 || s.Errnos["ENOSYS"] != 1 {
		t.Fatalf("stats %+v", s)
	}
	var calls, results uint64
	for _, n := range s.Calls {
		calls += n
	}
	for _, n := range s.Errnos {
		results += n
	}
	if calls != results || s.Served != calls || s.Lost != 0 {
		t.Fatalf("%d calls, %d results, %d served, %d lost: %+v", calls, results, s.Served, s.Lost, s)
	}
}

// settled waits until f holds no call in flight and returns its stats.
func settled(t *testing.T, f *Forwarder) Stats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if f.Stats().InFlight == 0 {
			return f.Stats() // counted before the calls in flight: read again
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls still in flight: %+v", f.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRealFastcallPread(t *testing.T) {
	v := newRealVM(t, 64, DefaultConfig())
	if err := os.WriteFile(filepath.Join(v.dir, "blob"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd := v.call(t, 0, abi.SysOpenat, atFDCWD, v.putString(0, "blob"), 0, 0)
	num := v.call(t, 0, abi.SysFastcallRegister, uint64(abi.SysPread64), uint64(fd.Ret), 1000, 4, 3)
	if num.Errno != 0 {
		t.Fatalf("register: %+v", num)
	}
	res, err := v.guest.Call(1, slotcall.Request{Number: uint16(num.Ret), Flags: abi.SysFlagBlocking | abi.SysFlagFastcall})
	if err != nil || res.Ret != 4 || string(v.heap[1000:1004]) != "3456" {
		t.Fatalf("fastcall: %+v %v %q", res, err, v.heap[1000:1004])
	}
	if r := v.call(t, 0, abi.SysFastcallRegister, uint64(abi.SysPread64), uint64(fd.Ret), uint64(len(v.heap)), 4, 0); r.Errno != abi.ErrnoFAULT {
		t.Fatalf("register past the heap: %+v, want EFAULT", r)
	}
	if r := v.call(t, 0, abi.SysFastcallRegister, uint64(abi.SysOpenat), uint64(fd.Ret), 0, 4, 0); r.Errno != abi.ErrnoINVAL {
		t.Fatalf("register of openat: %+v, want EINVAL", r)
	}
}

// flood has callers goroutines make non-blocking null calls on the VM's 1024
// slots without pause; the function it returns stops them.
func (v *realVM) flood(callers int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := v.guest.WithStop(done)
			for i := uint32(w); ; i = (i + uint32(callers)) % 1024 {
				if _, err := g.Call(i, slotcall.Request{Number: abi.SysNull}); err != nil {
					return
				}
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// A VM flooding its slots with calls does not stop another VM's calls.
func TestFloodFromOneVMLeavesAnotherServed(t *testing.T) {
	flood := newRealVM(t, 1024, DefaultConfig())
	quiet := newRealVM(t, 64, DefaultConfig())
	defer flood.flood(64)()
	var worst time.Duration
	for range 100 {
		t0 := time.Now()
		if r := quiet.call(t, 0, abi.SysNull); r.Errno != 0 {
			t.Fatalf("quiet VM's call: %+v", r)
		}
		worst = max(worst, time.Since(t0))
	}
	// Bounded, not fast: this machine has 2 cores for 64 flooding threads.
	if worst > 2*time.Second {
		t.Fatalf("quiet VM's slowest call took %v beside the flood", worst)
	}
	t.Logf("quiet VM's slowest of 100 null calls beside a 64-thread flood: %v", worst)
}

// mapShared maps a fresh memfd of n bytes; the fd stays open for the test.
func mapShared(tb testing.TB, n int) ([]byte, int) {
	fd, err := shm.NewMemfd("sluice-test", int64(n))
	if err != nil {
		tb.Fatal(err)
	}
	b, err := shm.Map(fd, n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { shm.Unmap(b); unix.Close(fd) })
	return b, fd
}

var (
	proxyOnce sync.Once
	proxyBin  string
	proxyErr  error
)

// proxyBinary builds sluice-proxy once for the package's benchmarks, or
// takes the one SLUICE_PROXY_BIN names (a machine without Go: build the test
// binary and sluice-proxy elsewhere, carry both).
func proxyBinary(tb testing.TB) string {
	proxyOnce.Do(func() {
		if bin := os.Getenv("SLUICE_PROXY_BIN"); bin != "" {
			proxyBin = bin
			return
		}
		dir, err := os.MkdirTemp("", "sluice-proxy-bench-")
		if err != nil {
			proxyErr = err
			return
		}
		proxyBin = filepath.Join(dir, "sluice-proxy")
		out, err := exec.Command("go", "build", "-o", proxyBin, "github.com/sluice-gpu/sluice/mediator/cmd/sluice-proxy").CombinedOutput()
		if err != nil {
			proxyErr = fmt.Errorf("building sluice-proxy: %v\n%s", err, out)
		}
	})
	if proxyErr != nil {
		tb.Fatal(proxyErr)
	}
	return proxyBin
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
