package proxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/testdeps"
	"github.com/sluice-gpu/sluice/mediator/internal/proxy/sandbox"
)

// The sandbox's isolation options end to end, against the real binary:
// the cgroup, a named network namespace, Landlock's scopes, the volume's
// bind mount and the file size limit.

// cgroup2Root returns where cgroup v2 is mounted (the unified hierarchy,
// also under a hybrid layout), or skips t.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no mountinfo: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mount-point ... - fstype source options
		fields := strings.Fields(sc.Text())
		i := slices.Index(fields, "-")
		if i > 4 && i+1 < len(fields) && fields[i+1] == "cgroup2" {
			return fields[4]
		}
	}
	t.Skip("cgroup v2 is not mounted")
	return ""
}

// tempCgroup creates a cgroup v2 directory for t and removes it after.
func tempCgroup(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a cgroup")
	}
	dir := filepath.Join(cgroup2Root(t), fmt.Sprintf("sluice-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_")))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup: %v", err)
	}
	t.Cleanup(func() {
		// Empty once the killed proxy is reaped (cleanups run last first).
		for i := 0; ; i++ {
			err := os.Remove(dir)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			if i == 100 {
				t.Errorf("removing the test cgroup: %v", err)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	return dir
}

// cgroupUsage reads usage_usec from dir's cpu.stat.
func cgroupUsage(t *testing.T, dir string) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^usage_usec (\d+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no usage_usec in cpu.stat: %q", b)
	}
	us, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return time.Duration(us) * time.Microsecond
}

func TestSandboxCgroup(t *testing.T) {
	cg := tempCgroup(t)
	s := startSandboxedWith(t, func(c *StartConfig) { c.Cgroup = cg })
	s.ready(t)
	procs, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(procs)); !slices.Equal(got, []string{strconv.Itoa(s.p.Pid)}) {
		t.Fatalf("cgroup.procs holds %q, want the proxy's pid %d alone", got, s.p.Pid)
	}
	// Work for the proxy: calls until it used 100 ms of CPU.
	deadline := time.Now().Add(20 * time.Second)
	var cpu time.Duration
	for cpu < 100*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy used only %v of CPU in 20 s of calls", cpu)
		}
		for range 200 {
			s.h.must(0, abi.SysClockGet, unix.CLOCK_MONOTONIC, outOff)
		}
		if cpu, err = s.p.CPUTime(); err != nil {
			t.Fatal(err)
		}
	}
	// The cgroup was the proxy's from its first instruction: all its CPU
	// time is charged there (the process's, in 10 ms ticks, may lag).
	usage := cgroupUsage(t, cg)
	if usage < cpu-20*time.Millisecond {
		t.Fatalf("the cgroup was charged %v, the proxy used %v", usage, cpu)
	}
	t.Logf("proxy CPU %v, its cgroup's usage %v", cpu, usage)
}

// tempNetns creates a named network namespace with loopback up and removes
// it after; it skips t without root or ip(8).
func tempNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace")
	}
	testdeps.Tool(t, "ip", "iproute2")
	name := fmt.Sprintf("sluice-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del: %v: %s", err, out)
		}
	})
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v: %s", err, out)
	}
	return name
}

// inNetns runs f on a thread in the named network namespace: the sockets
// it makes live there.
func inNetns(t *testing.T, name string, f func()) {
	t.Helper()
	ns, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ns)
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- err
			return
		}
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		f()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatalf("joining network namespace %s: %v", name, err)
	}
}

// sockaddrIn4 is a struct sockaddr_in for 127.0.0.1:port.
func sockaddrIn4(port int) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint16(b, unix.AF_INET)
	binary.BigEndian.PutUint16(b[2:], uint16(port))
	copy(b[4:], []byte{127, 0, 0, 1})
	return b
}

// proxyConnect makes the proxy connect a new socket of type typ in family
// to sa; it returns the errno of connect.
func (s *sandboxed) proxyConnect(t *testing.T, family, typ uint64, sa []byte) abi.Errno {
	t.Helper()
	fd := s.h.must(0, abi.SysSocket, family, typ, 0)
	defer s.h.must(0, abi.SysClose, uint64(fd))
	copy(s.h.heap[bufOff:], sa)
	_, e := s.h.call(0, abi.SysConnect, uint64(fd), bufOff, uint64(len(sa)))
	return e
}

func TestSandboxNamedNetns(t *testing.T) {
	name := tempNetns(t)
	var ln net.Listener
	inNetns(t, name, func() {
		var err error
		if ln, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
			t.Errorf("listening in %s: %v", name, err)
		}
	})
	if ln == nil {
		t.FailNow()
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	// The listener is not on the host's loopback: nothing answers there.
	if c, err := net.DialTimeout("tcp4", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatalf("port %d answers outside the namespace too: the test proves nothing", port)
	}

	joined := startSandboxedWith(t, func(c *StartConfig) { c.NetNS = name })
	joined.ready(t)
	wantErrno(t, "connect to the namespace's listener from the joined proxy",
		joined.proxyConnect(t, unix.AF_INET, unix.SOCK_STREAM, sockaddrIn4(port)), 0)

	isolated := startSandboxed(t, 0)
	isolated.ready(t)
	wantErrno(t, "connect to 127.0.0.1 from the isolated proxy",
		isolated.proxyConnect(t, unix.AF_INET, unix.SOCK_STREAM, sockaddrIn4(port)), abi.Errno(unix.ENETUNREACH))
}

// landlockABI reads the ABI level the proxy logged.
func (s *sandboxed) landlockABI(t *testing.T) int {
	t.Helper()
	m := regexp.MustCompile(`landlock_abi=(\d+)`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no landlock_abi in the proxy's log: %s", s.stderr)
	}
	abi, _ := strconv.Atoi(m[1])
	return abi
}

// An abstract unix socket lives in a network namespace: a proxy joined to a
// named one could reach the abstract sockets of the host's processes there,
// but for Landlock's scope (ABI 6).
func TestSandboxAbstractSocketScoped(t *testing.T) {
	name := tempNetns(t)
	addr := fmt.Sprintf("@sluice-test-%d", os.Getpid())
	var ln net.Listener
	inNetns(t, name, func() {
		var err error
		if ln, err = net.Listen("unix", addr); err != nil {
			t.Errorf("listening on %s in %s: %v", addr, name, err)
			return
		}
		// Reachable in the namespace by a process outside any Landlock
		// domain: what the proxy would reach without the scope.
		c, err := net.Dial("unix", addr)
		if err != nil {
			t.Errorf("dialing %s in %s from outside the sandbox: %v", addr, name, err)
			return
		}
		c.Close()
	})
	if ln == nil || t.Failed() {
		t.FailNow()
	}
	defer ln.Close()
	s := startSandboxedWith(t, func(c *StartConfig) { c.NetNS = name })
	s.ready(t)
	sa := make([]byte, 2, 2+len(addr))
	binary.LittleEndian.PutUint16(sa, unix.AF_UNIX)
	sa = append(append(sa, 0), addr[1:]...) // abstract: a NUL, then the name
	e := s.proxyConnect(t, unix.AF_UNIX, unix.SOCK_STREAM, sa)
	abiLevel := s.landlockABI(t)
	scoped := strings.Contains(s.stderr.String(), "landlock_scoped=true")
	if abiLevel < sandbox.LandlockScopes {
		if scoped {
			t.Errorf("landlock_scoped=true at ABI %d", abiLevel)
		}
		t.Skipf("the kernel's Landlock ABI is %d (%s); scoping abstract unix sockets needs %d (Linux 6.12): connect got %s",
			abiLevel, kernelRelease(), sandbox.LandlockScopes, errnoName(e))
	}
	if !scoped {
		t.Errorf("no landlock_scoped=true in the proxy's log at ABI %d: %s", abiLevel, s.stderr)
	}
	wantErrno(t, "connect to a host process's abstract socket in the joined namespace", e, abi.Errno(unix.EPERM))
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown kernel"
	}
	return "Linux " + unix.ByteSliceToString(u.Release[:])
}

// sandboxVolume makes a volume directory for launch tests: its ancestors
// searchable, owned by uid (the sandbox's root when uid is its UIDBase).
func sandboxVolume(t *testing.T, uid int) string {
	t.Helper()
	base := t.TempDir()
	for d := base; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	vol := filepath.Join(base, "volume")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(vol, uid, uid); err != nil {
		t.Fatal(err)
	}
	return vol
}

// launchFatal starts the binary on volume as Start would after preparing
// it, without the preparation, and returns the proxy's first message's
// error.
func launchFatal(t *testing.T, volume string) error {
	t.Helper()
	RequiresUserNS(t)
	stderr := &lockedWriter{w: new(strings.Builder)}
	p, err := launch(StartConfig{
		Binary: proxyBinary(t), VM: "test", Volume: volume, HeapFD: -1,
		MaxFiles: 256, UIDBase: DefaultUIDBase(7), Stderr: stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = p.Kill()
		_ = p.Wait()
	}()
	_, err = AwaitReady(p.Conn, 20*time.Second)
	if err == nil {
		t.Fatalf("the proxy served volume %s", volume)
	}
	return err
}

func TestSandboxVolumeIsWhatWasChecked(t *testing.T) {
	base := DefaultUIDBase(7)
	// The proxy's "/" is one mount, nosuid,nodev, of the volume's directory.
	t.Run("the root is the volume", func(t *testing.T) {
		s := startSandboxed(t, 0)
		s.ready(t)
		mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", s.p.Pid))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(mi)), "\n")
		if len(lines) != 1 {
			t.Fatalf("the proxy sees %d mounts, want its root alone:\n%s", len(lines), mi)
		}
		// id parent major:minor root mount-point options ...
		f := strings.Fields(lines[0])
		opts := strings.Split(f[5], ",")
		if f[4] != "/" || !slices.Contains(opts, "nosuid") || !slices.Contains(opts, "nodev") {
			t.Errorf("the proxy's mount: %s; want / nosuid,nodev", lines[0])
		}
		var vol, root unix.Stat_t
		if err := unix.Stat(s.volume, &vol); err != nil {
			t.Fatal(err)
		}
		if err := unix.Stat(fmt.Sprintf("/proc/%d/root", s.p.Pid), &root); err != nil {
			t.Fatal(err)
		}
		if root.Dev != vol.Dev || root.Ino != vol.Ino {
			t.Errorf("the proxy's root is %d:%d, the volume %d:%d", root.Dev, root.Ino, vol.Dev, vol.Ino)
		}
	})
	t.Run("Start refuses a symlink", func(t *testing.T) {
		dir := sandboxVolume(t, int(base))
		link := filepath.Join(filepath.Dir(dir), "link")
		if err := os.Symlink(dir, link); err != nil {
			t.Fatal(err)
		}
		_, err := Start(StartConfig{Binary: "/nonexistent", VM: "test", Volume: link, HeapFD: -1, UIDBase: base})
		if err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
			t.Fatalf("Start with a symlink volume: %v, want a refusal", err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(link, &st); err != nil || st.Uid != 0 {
			t.Fatalf("the link's owner is %d (%v): Start chowned it", st.Uid, err)
		}
	})
	// The path names a link to the prepared volume by the time the sandbox
	// mounts it: refused, not followed.
	t.Run("the sandbox refuses a symlink", func(t *testing.T) {
		dir := sandboxVolume(t, int(base))
		link := filepath.Join(filepath.Dir(dir), "link")
		if err := os.Symlink(dir, link); err != nil {
			t.Fatal(err)
		}
		if err := launchFatal(t, link); !strings.Contains(err.Error(), "is a symbolic link") {
			t.Fatalf("sandbox on a symlink: %v", err)
		}
	})
	// The path names another directory (swapped through a link above it,
	// say) by the time the sandbox mounts it: one not given to the sandbox.
	t.Run("the sandbox refuses a directory not given to it", func(t *testing.T) {
		other := sandboxVolume(t, 0)
		up := filepath.Join(t.TempDir(), "up")
		if err := os.Symlink(filepath.Dir(other), up); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(filepath.Dir(up), 0o755)
		err := launchFatal(t, filepath.Join(up, "volume"))
		if !strings.Contains(err.Error(), "owned by uid 65534 of the sandbox, want 0") {
			t.Fatalf("sandbox on host root's directory: %v", err)
		}
	})
	t.Run("a file", func(t *testing.T) {
		dir := sandboxVolume(t, int(base))
		f := filepath.Join(dir, "file")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := launchFatal(t, f); !strings.Contains(err.Error(), "is not a directory") {
			t.Fatalf("sandbox on a file: %v", err)
		}
	})
}

// RLIMIT_FSIZE: a write past --max-file-size is cut at it, one at it is
// EFBIG, and the proxy lives on (Go ignores SIGXFSZ).
func TestSandboxMaxFileSize(t *testing.T) {
	s := startSandboxedWith(t, func(c *StartConfig) { c.MaxFileSize = 10 })
	s.ready(t)
	h := s.h
	fd := uint64(h.must(0, abi.SysOpenat, atFDCWD, h.path(pathA, "/big"), unix.O_CREAT|unix.O_RDWR, 0o644))
	copy(h.heap[bufOff:], "0123456789abcdef")
	if n, e := h.call(0, abi.SysPwrite64, fd, bufOff, 4, 8); n != 2 || e != 0 {
		t.Fatalf("pwrite of 4 at 8 under a limit of 10: %d errno %s, want 2", n, errnoName(e))
	}
	_, e := h.call(0, abi.SysPwrite64, fd, bufOff, 4, 10)
	wantErrno(t, "pwrite at the limit", e, abi.Errno(unix.EFBIG))
	h.must(0, abi.SysLseek, fd, 10, 0)
	_, e = h.call(0, abi.SysWrite, fd, bufOff, 1)
	wantErrno(t, "write at the limit", e, abi.Errno(unix.EFBIG))
	if fi, err := os.Stat(filepath.Join(s.volume, "big")); err != nil || fi.Size() != 10 {
		t.Fatalf("file size %v (%v), want 10", fi.Size(), err)
	}
	if !strings.Contains(s.stderr.String(), "max_file_size=10") {
		t.Errorf("no max_file_size=10 in the proxy's log: %s", s.stderr)
	}
}
