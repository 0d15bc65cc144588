package proxy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// proxyBinary builds sluice-proxy (static, as the Makefile does) once.
func proxyBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "sluice-proxy-bin"); binErr != nil {
			return
		}
		// Private on purpose: Start executes the binary through a descriptor,
		// so the sandbox's ids need no search permission above it.
		_ = os.Chmod(binDir, 0o700)
		binPath = filepath.Join(binDir, "sluice-proxy")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/sluice-gpu/sluice/mediator/cmd/sluice-proxy")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// RequiresUserNS skips t when the kernel refuses user namespaces (the
// sandbox needs one) or the test cannot map ids (not root).
func RequiresUserNS(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the sandbox maps a host uid range")
	}
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 100000, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 100000, Size: 1}},
	}
	if err := cmd.Run(); err != nil {
		t.Skipf("the kernel refuses user namespaces: %v", err)
	}
}

// sandboxed is a real sluice-proxy in its sandbox, with a heap memfd the
// test maps too.
type sandboxed struct {
	h      *harness
	p      *Process
	volume string
	stderr *lockedWriter
}

const sbHeap = 1 << 20

// startSandboxed starts the proxy; files are created in the volume first
// (by the host's root: unmapped owner inside).
func startSandboxed(t *testing.T, maxFiles int, args ...string) *sandboxed {
	t.Helper()
	return startSandboxedWith(t, func(c *StartConfig) { c.MaxFiles, c.Args = maxFiles, args })
}

// startSandboxedWith is startSandboxed with set's changes to the start.
func startSandboxedWith(t *testing.T, set func(*StartConfig)) *sandboxed {
	t.Helper()
	RequiresUserNS(t)
	bin := proxyBinary(t)
	base := t.TempDir()
	for d := base; d != filepath.Dir(os.TempDir()) && d != "/"; d = filepath.Dir(d) {
		if d == os.TempDir() {
			break
		}
		_ = os.Chmod(d, 0o755) // the sandbox's root must reach the volume
	}
	vol := filepath.Join(base, "volume")
	mfd, err := unix.MemfdCreate("heap", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(mfd) })
	// The heap sits at a page-aligned offset in the memfd, as in a VM region.
	const heapOff = 3 * 4096
	if err := unix.Ftruncate(mfd, heapOff+sbHeap); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(mfd, heapOff, sbHeap, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(m) })
	stderr := &lockedWriter{w: new(strings.Builder)}
	cfg := StartConfig{
		Binary: bin, VM: "test", Volume: vol, HeapFD: mfd, HeapOff: heapOff, HeapSize: sbHeap,
		UIDBase: DefaultUIDBase(7), Stderr: stderr,
	}
	set(&cfg)
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Kill()
		_ = p.Wait()
	})
	s := &sandboxed{p: p, volume: vol, stderr: stderr}
	s.h = &harness{tb: t, conn: p.Conn, heap: m, dir: vol}
	return s
}

type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func (s *sandboxed) ready(t *testing.T) {
	t.Helper()
	if _, err := AwaitReady(s.p.Conn, 20*time.Second); err != nil {
		t.Fatalf("%v (stderr: %s)", err, s.stderr)
	}
}

func TestSandboxEscapes(t *testing.T) {
	s := startSandboxed(t, 0)
	// Fixtures the host puts in the volume before the guest looks.
	if err := os.Symlink("/etc/passwd", filepath.Join(s.volume, "passwd-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../..", filepath.Join(s.volume, "up")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(s.volume, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	s.ready(t)
	h := s.h
	etc, _ := os.ReadFile("/etc/passwd")
	if len(etc) == 0 {
		t.Fatal("the host has no /etc/passwd to escape to")
	}
	open := func(path string) abi.Errno {
		_, e := h.call(0, abi.SysOpenat, atFDCWD, h.path(pathA, path), unix.O_RDONLY, 0)
		return e
	}
	for _, tc := range []struct {
		path string
		want abi.Errno
	}{
		{"../../etc/passwd", abi.ErrnoNOENT},
		{"/etc/passwd", abi.ErrnoNOENT},
		{"/../../../etc/passwd", abi.ErrnoNOENT},
		{"passwd-link", abi.ErrnoNOENT},
		{"up/etc/passwd", abi.ErrnoNOENT},
		{"/proc/self/root/etc/passwd", abi.ErrnoNOENT},
		{"/proc/1/environ", abi.ErrnoNOENT},
		{"/dev/null", abi.ErrnoNOENT},
		{"/sys/kernel", abi.ErrnoNOENT},
		// A device node in the volume: the mount is nodev.
		{"null", abi.ErrnoACCES},
	} {
		t.Run(strings.ReplaceAll(tc.path, "/", "_"), func(t *testing.T) {
			wantErrno(t, "open "+tc.path, open(tc.path), tc.want)
		})
	}
	t.Run("heap and path arguments", func(t *testing.T) {
		_, e := h.call(0, abi.SysRead, 100, sbHeap-1, 2)
		wantErrno(t, "read past the heap", e, abi.ErrnoFAULT)
		_, e = h.call(0, abi.SysOpenat, atFDCWD, sbHeap, 0, 0)
		wantErrno(t, "path past the heap", e, abi.ErrnoFAULT)
		_, e = h.call(0, abi.SysFstat, 100, 1<<63)
		wantErrno(t, "fstat at 2^63", e, abi.ErrnoFAULT)
		long := strings.Repeat("x", abi.PathMax)
		_, e = h.call(0, abi.SysOpenat, atFDCWD, h.path(pathA, long), 0, 0)
		wantErrno(t, "long path", e, abi.ErrnoNAMETOOLONG)
		copy(h.heap[sbHeap-4:], "abcd")
		_, e = h.call(0, abi.SysOpenat, atFDCWD, sbHeap-4, 0, 0)
		wantErrno(t, "unterminated path", e, abi.ErrnoFAULT)
		_, e = h.call(0, 0x3ff)
		wantErrno(t, "unknown call", e, abi.ErrnoNOSYS)
		_, e = h.call(0, 59) // execve's number
		wantErrno(t, "execve by number", e, abi.ErrnoNOSYS)
		_, e = h.call(200, abi.SysGetrusage, 0, outOff)
		wantErrno(t, "unregistered context", e, abi.ErrnoSRCH)
	})
	t.Run("uid 1000 and a 0600 file of root", func(t *testing.T) {
		fd := h.must(0, abi.SysOpenat, atFDCWD, h.path(pathA, "/secret"), unix.O_CREAT|unix.O_WRONLY, 0o600)
		h.must(0, abi.SysClose, uint64(fd))
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(s.volume, "secret"), &st); err != nil || st.Uid != DefaultUIDBase(7) {
			t.Errorf("file made by the sandbox's root has host uid %d (%v), want %d", st.Uid, err, DefaultUIDBase(7))
		}
		id := h.must(0, abi.SysContextRegister, 1000, 1000, 0o022, h.path(pathA, "/"))
		_, e := h.call(uint8(id), abi.SysOpenat, atFDCWD, h.path(pathA, "/secret"), unix.O_RDONLY, 0)
		wantErrno(t, "uid 1000 reads root's 0600 file", e, abi.ErrnoACCES)
		h.must(0, abi.SysContextUnregister, uint64(id))
	})
	t.Run("isolated network", func(t *testing.T) {
		fd := h.must(0, abi.SysSocket, unix.AF_INET, unix.SOCK_DGRAM, 0)
		sa := []byte{unix.AF_INET, 0, 0, 53, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}
		copy(h.heap[bufOff:], sa)
		_, e := h.call(0, abi.SysConnect, uint64(fd), bufOff, 16)
		wantErrno(t, "connect to 1.1.1.1:53", e, abi.Errno(unix.ENETUNREACH))
		_, e = h.call(0, abi.SysSocket, unix.AF_NETLINK, unix.SOCK_RAW, 0)
		wantErrno(t, "netlink socket", e, abi.Errno(unix.EAFNOSUPPORT))
	})
	t.Run("heap is the VM's", func(t *testing.T) {
		copy(h.heap[bufOff:], "through the memfd")
		fd := uint64(h.must(0, abi.SysOpenat, atFDCWD, h.path(pathA, "/out"), unix.O_CREAT|unix.O_RDWR, 0o644))
		h.must(0, abi.SysWrite, fd, bufOff, 17)
		if got, err := os.ReadFile(filepath.Join(s.volume, "out")); string(got) != "through the memfd" {
			t.Errorf("file holds %q (%v)", got, err)
		}
	})
	if cpu, err := s.p.CPUTime(); err != nil || cpu < 0 {
		t.Errorf("CPUTime = %v, %v", cpu, err)
	}
	if !strings.Contains(s.stderr.String(), "landlock_abi=") {
		t.Errorf("no sandbox report in the log: %s", s.stderr)
	}
	t.Logf("proxy log: %s", s.stderr)
}

func TestSandboxFileLimit(t *testing.T) {
	s := startSandboxed(t, 32)
	s.ready(t)
	h := s.h
	reqs := make([]proxyproto.Request, 40)
	for i := range reqs {
		reqs[i] = proxyproto.Request{Number: abi.SysOpenat, Args: [6]uint64{atFDCWD, h.path(pathA, "/"), unix.O_RDONLY}}
	}
	res, _ := h.batch(reqs)
	opened := 0
	for _, r := range res {
		if r.Errno == 0 {
			opened++
		}
	}
	wantErrno(t, "open past RLIMIT_NOFILE", res[len(res)-1].Errno, abi.ErrnoMFILE)
	if opened == 0 || opened >= 32 {
		t.Errorf("opened %d files under a limit of 32", opened)
	}
}

func TestSandboxSeccomp(t *testing.T) {
	for _, tc := range []struct {
		probe string
		kill  bool
		errno syscall.Errno
	}{
		{"mount", true, 0},
		{"ptrace", true, 0},
		{"execve", true, 0},
		{"reboot", false, unix.EPERM},
		{"unshare-net", false, unix.EPERM},
		{"socket-netlink", false, unix.EPERM},
		{"socket-raw", false, unix.EPERM},
		{"setsockopt-ip", false, unix.EPERM},
		{"socket-inet", false, 0},
		{"setsockopt-socket", false, 0},
	} {
		t.Run(tc.probe, func(t *testing.T) {
			s := startSandboxed(t, 0, "--probe-syscall", tc.probe)
			_, err := AwaitReady(s.p.Conn, 20*time.Second)
			werr := s.p.Wait()
			if tc.kill {
				var ee *exec.ExitError
				if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGSYS {
					t.Errorf("%s: proxy ended with %v (first message: %v), want killed by SIGSYS", tc.probe, werr, err)
				}
				return
			}
			want := fmt.Sprintf("probe %s: errno %d", tc.probe, int(tc.errno))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want %q", tc.probe, err, want)
			}
		})
	}
}
