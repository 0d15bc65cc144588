package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/sluice-gpu/sluice/internal/testdeps"
)

// guestBootTimeout bounds vm start: a TCG boot takes about 2.5 s; two guests
// booting at once on a loaded 2-core machine take longer.
const guestBootTimeout = 2 * time.Minute

// RequiresQEMU fails the spec unless QEMU and what the guest image is built
// from (Debian's linux-image-amd64, cpio, xz) are installed
// (deploy/test-deps.sh installs them; internal/testdeps).
func RequiresQEMU() {
	RequiresLinux()
	requireTools([][2]string{{"qemu-system-x86_64", "qemu-system-x86"}, {"cpio", "cpio"}, {"xz", "xz-utils"}})
	if k, _ := filepath.Glob("/boot/vmlinuz-*-amd64"); len(k) == 0 {
		testdeps.Missing(specTB{}, "linux-image-amd64", "no Debian kernel /boot/vmlinuz-*-amd64 for the guest image")
	}
}

var (
	imageOnce sync.Once
	imageDir  string
	imageErr  error
)

// GuestImage builds the guest image (deploy/guest-image.sh, as make
// guest-image does) from the suite's binaries once, and returns its
// directory (inside the binaries' directory, removed with them).
func GuestImage() string {
	ginkgo.GinkgoHelper()
	imageOnce.Do(func() {
		b := Bins()
		dir := filepath.Join(b.Dir, "guest")
		cmd := exec.Command(filepath.Join(b.Root, "deploy", "guest-image.sh"), dir, b.Dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("building the guest image: %w\n%s", err, out)
			return
		}
		imageDir = dir
	})
	gomega.Expect(imageErr).NotTo(gomega.HaveOccurred())
	return imageDir
}

// Guest is a QEMU guest started with sluicectl vm start.
type Guest struct {
	Name        string  `json:"name"`
	PID         int     `json:"pid"`
	Accel       string  `json:"accel"`
	RunDir      string  `json:"run_dir"`
	Endpoint    string  `json:"endpoint"`
	Volume      string  `json:"volume"` // the VM's volume on the host, /volume in the guest; "": none
	Agent       string  `json:"agent"`
	SerialLog   string  `json:"serial_log"`
	BootSeconds float64 `json:"boot_seconds"`
	d           *Daemon
}

// GuestRunDir is where this daemon's guests keep their run directories.
func (d *Daemon) GuestRunDir() string { return filepath.Join(d.Dir, "guests") }

// StartGuest boots a QEMU guest for VM name (sluicectl vm start, which
// creates the VM if needed) and waits for its agent. When the spec ends the
// guest is stopped if it still runs, and QEMU is killed if it will not stop;
// its console log is printed to the spec's output if the spec failed.
func (d *Daemon) StartGuest(name string, args ...string) *Guest {
	ginkgo.GinkgoHelper()
	all := append([]string{"vm", "start", name, "--image", GuestImage(), "--run-dir", d.GuestRunDir(), "--json",
		"--wait", guestBootTimeout.String()}, args...)
	r := d.Ctl(all...)
	runDir := filepath.Join(d.GuestRunDir(), name)
	ginkgo.DeferCleanup(func() { stopGuest(d, name, runDir) })
	gomega.Expect(r.ExitCode).To(gomega.Equal(0), "%s\nconsole:\n%s", r, readFile(filepath.Join(runDir, "serial.log")))
	startedQEMU(readPID(filepath.Join(runDir, "qemu.pid")))
	g := &Guest{d: d}
	gomega.Expect(json.Unmarshal([]byte(r.Stdout), g)).To(gomega.Succeed(), "decoding vm start's output:\n%s", r.Stdout)
	return g
}

// stopGuest stops a guest at the end of a spec: sluicectl vm stop, then
// SIGKILL to a QEMU that is still there.
func stopGuest(d *Daemon, name, runDir string) {
	pid := readPID(filepath.Join(runDir, "qemu.pid"))
	if ginkgo.CurrentSpecReport().Failed() {
		fmt.Fprintf(ginkgo.GinkgoWriter, "console of %s:\n%s\n", name, readFile(filepath.Join(runDir, "serial.log")))
	}
	if pid > 0 && qemuAlive(pid) {
		// Not d.Ctl: it registers a cleanup, which a cleanup may not do.
		ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
		out, err := exec.CommandContext(ctx, Bins().Sluicectl, "--socket", d.Socket, "vm", "stop", name,
			"--run-dir", d.GuestRunDir(), "--grace", "10s").CombinedOutput()
		cancel()
		if err != nil {
			fmt.Fprintf(ginkgo.GinkgoWriter, "stopping guest %s: %v\n%s", name, err, out)
		}
	}
	if pid > 0 && qemuAlive(pid) {
		p, _ := os.FindProcess(pid)
		p.Kill()
		deadline := time.Now().Add(10 * time.Second)
		for qemuAlive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	gomega.Expect(qemuAlive(pid)).To(gomega.BeFalse(), "QEMU of guest %s (pid %d) is still running", name, pid)
}

// Exec runs an agent command line in the guest (sluicectl vm exec).
func (g *Guest) Exec(args ...string) Result {
	ginkgo.GinkgoHelper()
	return g.d.Ctl(append([]string{"vm", "exec", g.Name, "--run-dir", g.d.GuestRunDir(), "--"}, args...)...)
}

// StartExec starts Exec and returns at once; Wait for its result.
func (g *Guest) StartExec(args ...string) *Proc {
	ginkgo.GinkgoHelper()
	return start(Bins().Sluicectl, append([]string{"--socket", g.d.Socket, "vm", "exec", g.Name,
		"--run-dir", g.d.GuestRunDir(), "--"}, args...)...)
}

// Stop powers the guest off (sluicectl vm stop) and asserts how it went.
func (g *Guest) Stop() string {
	ginkgo.GinkgoHelper()
	out := g.d.CtlOK("vm", "stop", g.Name, "--run-dir", g.d.GuestRunDir())
	gomega.Expect(qemuAlive(g.PID)).To(gomega.BeFalse(), "QEMU should be gone after vm stop")
	return out
}

// LeftoverQEMU lists the running QEMU processes whose command line names
// one of dirs (an argument that is the directory or a path below it, also
// after an option's "="), as "pid cmdline". dirs are the suite's own
// (temporary directories have unique names), so that QEMUs of another
// suite running on the machine are not counted.
func LeftoverQEMU(dirs ...string) []string {
	entries, _ := os.ReadDir("/proc")
	var left []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !qemuAlive(pid) {
			continue
		}
		args := strings.Split(strings.TrimRight(readFile(filepath.Join("/proc", e.Name(), "cmdline")), "\x00"), "\x00")
		if namesDir(args, dirs) {
			left = append(left, fmt.Sprintf("%d %s", pid, strings.Join(args, " ")))
		}
	}
	return left
}

// SuiteQEMU lists the QEMU processes this suite started that still run:
// those StartGuest and Domain.Start recorded (by pid and start time: a
// pid used again since is not one), and those whose command line names a
// directory the framework created (its binaries' directory holds the
// guest image every guest boots).
func SuiteQEMU() []string {
	qemuMu.Lock()
	started := maps.Clone(qemuStarted)
	qemuMu.Unlock()
	left := LeftoverQEMU(TempDirs()...)
	for pid, start := range started {
		if st, ok := procStat(pid); ok && st.start == start && qemuAlive(pid) &&
			!slices.ContainsFunc(left, func(l string) bool { return strings.HasPrefix(l, strconv.Itoa(pid)+" ") }) {
			left = append(left, fmt.Sprintf("%d (started by the suite)", pid))
		}
	}
	return left
}

var (
	qemuMu      sync.Mutex
	qemuStarted = map[int]string{} // pid -> its start time, of each QEMU the suite started
)

// startedQEMU records a QEMU the suite started, for SuiteQEMU.
func startedQEMU(pid int) {
	if st, ok := procStat(pid); ok && pid > 0 {
		qemuMu.Lock()
		qemuStarted[pid] = st.start
		qemuMu.Unlock()
	}
}

// namesDir reports whether an argument is one of dirs or a path below one,
// alone or after an option's "=", "," or ":" (-kernel DIR/vmlinuz,
// path=DIR/vm.sock): /tmp/x-1 does not name /tmp/x-12.
func namesDir(args, dirs []string) bool {
	for _, a := range args {
		for _, d := range dirs {
			d = filepath.Clean(d)
			for off := 0; ; {
				i := strings.Index(a[off:], d)
				if i < 0 {
					break
				}
				start, end := off+i, off+i+len(d)
				if (start == 0 || strings.ContainsRune("=,:", rune(a[start-1]))) &&
					(end == len(a) || strings.ContainsRune("/,:", rune(a[end]))) {
					return true
				}
				off = end
			}
		}
	}
	return false
}

// stat is what /proc/PID/stat says of a process.
type stat struct {
	comm  string // the command name
	state byte   // R, S, Z, ...
	start string // its start time, in clock ticks after boot
}

// procStat reads /proc/PID/stat; ok is false when pid is gone.
func procStat(pid int) (stat, bool) {
	if pid <= 0 {
		return stat{}, false
	}
	s := readFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+2 >= len(s) {
		return stat{}, false
	}
	// After the name: state (field 3), ..., starttime (field 22).
	f := strings.Fields(s[end+1:])
	if len(f) < 20 {
		return stat{}, false
	}
	return stat{comm: s[open+1 : end], state: f[0][0], start: f[19]}, true
}

// zombie reports whether pid has exited but is not reaped yet.
func zombie(pid int) bool {
	st, ok := procStat(pid)
	return ok && st.state == 'Z'
}

// qemuAlive reports whether pid runs and is a QEMU (not a zombie).
func qemuAlive(pid int) bool {
	st, ok := procStat(pid)
	return ok && st.state != 'Z' && strings.Contains(st.comm, "qemu")
}

func readPID(path string) int {
	pid, _ := strconv.Atoi(strings.TrimSpace(readFile(path)))
	return pid
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
