package framework

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/sluice-gpu/sluice/internal/testdeps"
)

// Where the system libvirt keeps what the libvirt fixtures touch. libvirt
// looks for hooks only in HooksDir, and only when libvirtd starts.
const (
	LibvirtURI      = "qemu:///system"
	HooksDir        = "/etc/libvirt/hooks"
	libvirtQEMULogs = "/var/log/libvirt/qemu" // NAME.log: QEMU's command line and stderr
	libvirtQEMURun  = "/run/libvirt/qemu"     // NAME.pid while a domain runs
	virtlogdSocket  = "/run/libvirt/virtlogd-sock"
)

// Deadlock guards of the libvirt fixtures. libvirtd probes QEMU's
// capabilities when it first starts, which takes seconds under TCG on a
// loaded machine.
const (
	libvirtReadyTimeout = time.Minute
	libvirtStopTimeout  = 30 * time.Second
	domainStopTimeout   = 30 * time.Second
)

// RequiresLibvirt fails the spec unless libvirt's daemons, QEMU driver and
// tools are installed (deploy/test-deps.sh installs them;
// internal/testdeps).
func RequiresLibvirt() {
	RequiresLinux()
	requireTools([][2]string{{"libvirtd", "libvirt-daemon-system"}, {"virtlogd", "libvirt-daemon-system"},
		{"virsh", "libvirt-clients"}, {"virt-xml-validate", "libvirt-clients"}})
	if drv, _ := filepath.Glob("/usr/lib/*/libvirt/connection-driver/libvirt_driver_qemu.so"); len(drv) == 0 {
		testdeps.Missing(specTB{}, "libvirt-daemon-driver-qemu", "libvirt has no QEMU driver (libvirt_driver_qemu.so)")
	}
}

// LibvirtOptions configure StartLibvirt.
type LibvirtOptions struct {
	// HookSocket, when set, installs Sluice's qemu hook
	// (deploy/install-libvirt-hook.sh) for the sluiced listening there,
	// before libvirtd starts. Default: no hook.
	HookSocket string
}

// Libvirt is a libvirtd started by the spec, in the foreground, so that it
// is the framework's child: stopped when the spec ends, killed if the test
// binary dies.
type Libvirt struct {
	proc *Proc
}

// StartLibvirt starts virtlogd (unless one runs) and libvirtd, with the hook
// of opts installed first, and waits until libvirtd answers. It fails the
// spec (internal/testdeps.Blocked) if a libvirtd or virtqemud already runs:
// that daemon is someone else's, and it would not read a new hook anyway.
// When the spec ends, libvirtd and a virtlogd it started are stopped and
// the hook is removed.
func StartLibvirt(opts LibvirtOptions) *Libvirt {
	ginkgo.GinkgoHelper()
	if pids := processesNamed("libvirtd", "virtqemud"); len(pids) > 0 {
		testdeps.Blocked(specTB{}, "libvirt-daemon-system",
			fmt.Sprintf("a libvirtd is already running (pid %d): the spec starts its own and leaves others alone", pids[0]),
			"systemctl stop libvirtd.service libvirtd.socket libvirtd-ro.socket libvirtd-admin.socket, or stop that daemon")
	}
	if opts.HookSocket != "" {
		installHook(opts.HookSocket)
	}
	if len(processesNamed("virtlogd")) == 0 {
		// libvirt hands QEMU's stderr to virtlogd, which writes NAME.log.
		logd := start("virtlogd")
		ginkgo.DeferCleanup(stopDaemon, logd)
		gomega.Eventually(func() error {
			if logd.Exited() {
				return gomega.StopTrying("virtlogd exited before it listened\n" + logd.res.String())
			}
			if !IsSocket(virtlogdSocket) {
				return fmt.Errorf("%s does not exist yet", virtlogdSocket)
			}
			return nil
		}).WithTimeout(readyTimeout).WithPolling(50 * time.Millisecond).Should(gomega.Succeed())
	}
	l := &Libvirt{proc: start("libvirtd")}
	ginkgo.DeferCleanup(stopDaemon, l.proc)
	gomega.Eventually(func() error {
		if l.proc.Exited() {
			return gomega.StopTrying("libvirtd exited before it answered\n" + l.proc.res.String())
		}
		if r := l.Virsh("version"); r.ExitCode != 0 {
			return errors.New(r.String())
		}
		return nil
	}).WithTimeout(libvirtReadyTimeout).WithPolling(200 * time.Millisecond).Should(gomega.Succeed())
	return l
}

// stopDaemon stops a libvirt daemon the framework started: SIGTERM, then the
// wait; its output goes to the spec's output if the spec failed.
func stopDaemon(p *Proc) {
	ginkgo.GinkgoHelper()
	p.Signal(syscall.SIGTERM)
	r := p.WaitTimeout(libvirtStopTimeout)
	if ginkgo.CurrentSpecReport().Failed() || r.ExitCode != 0 {
		fmt.Fprintf(ginkgo.GinkgoWriter, "%s\n", r)
	}
}

// installHook runs deploy/install-libvirt-hook.sh for the sluiced at socket.
// Cleanup uninstalls it and removes the directories it created.
func installHook(socket string) {
	ginkgo.GinkgoHelper()
	wrapper := filepath.Join(HooksDir, "qemu.d", "sluice")
	if _, err := os.Lstat(wrapper); err == nil {
		testdeps.Blocked(specTB{}, "libvirt-daemon-system",
			"a Sluice libvirt hook is already installed at "+wrapper+": the spec will not replace it",
			"deploy/install-libvirt-hook.sh --uninstall")
	}
	var created []string // outermost first
	for _, dir := range []string{HooksDir, filepath.Dir(wrapper)} {
		if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
			created = append(created, dir)
		}
	}
	script := filepath.Join(Bins().Root, "deploy", "install-libvirt-hook.sh")
	ginkgo.DeferCleanup(func() {
		r := runHookScript(script, "--uninstall")
		gomega.Expect(r.ExitCode).To(gomega.Equal(0), "uninstalling the hook: %s", r)
		for i := len(created) - 1; i >= 0; i-- {
			gomega.Expect(os.Remove(created[i])).To(gomega.Succeed(), "removing %s, which the spec created", created[i])
		}
	})
	r := runHookScript(script, "--socket", socket, "--bin", Bins().Hook)
	gomega.Expect(r.ExitCode).To(gomega.Equal(0), "installing the hook: %s", r)
	gomega.Expect(wrapper).To(gomega.BeARegularFile(), "the install script should write the wrapper: %s", r)
}

// runHookScript runs the install script with HOOKS_DIR pinned to the one
// directory libvirt reads, whatever the caller's environment says.
func runHookScript(script string, args ...string) Result {
	return runCmd(append(cleanEnv(), "HOOKS_DIR="+HooksDir), script, args...)
}

// runCmd runs path to completion, at most DefaultTimeout, with env. Unlike
// Run it registers no cleanup, so cleanups can call it (Ginkgo forbids
// DeferCleanup inside DeferCleanup).
func runCmd(env []string, path string, args ...string) Result {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
	cmd.SysProcAttr = sysProcAttr()
	began := time.Now()
	err := cmd.Run()
	r := Result{Args: append([]string{path}, args...), Stdout: stdout.String(), Stderr: stderr.String(),
		ExitCode: cmd.ProcessState.ExitCode(), Wall: time.Since(began)}
	if err != nil && r.ExitCode == 0 {
		r.ExitCode = -1
		r.Stderr += err.Error()
	}
	return r
}

// Virsh runs virsh against this libvirtd; cleanups may call it.
func (l *Libvirt) Virsh(args ...string) Result {
	return runCmd(cleanEnv(), "virsh", append([]string{"-c", LibvirtURI}, args...)...)
}

// VirshOK runs virsh, asserts it succeeded and returns its stdout.
func (l *Libvirt) VirshOK(args ...string) string {
	ginkgo.GinkgoHelper()
	r := l.Virsh(args...)
	gomega.Expect(r.ExitCode).To(gomega.Equal(0), "%s", r)
	return r.Stdout
}

// Domain is a libvirt domain defined by the spec.
type Domain struct {
	Name    string
	Console string // the file of its <serial type='file'>, if any
	l       *Libvirt
	pid     int // QEMU's, once started
}

// domainFile is what Define reads from a domain's XML.
type domainFile struct {
	Name    string `xml:"name"`
	Serials []struct {
		Source struct {
			Path string `xml:"path,attr"`
		} `xml:"source"`
	} `xml:"devices>serial"`
}

// Define defines the domain in file (virsh define). When the spec ends the
// domain is destroyed if it runs and undefined, its QEMU is killed if it
// is still there, and the QEMU log libvirt wrote for it is removed.
func (l *Libvirt) Define(file string) *Domain {
	ginkgo.GinkgoHelper()
	data, err := os.ReadFile(file)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	var x domainFile
	gomega.Expect(xml.Unmarshal(data, &x)).To(gomega.Succeed(), "reading domain XML %s", file)
	gomega.Expect(x.Name).NotTo(gomega.BeEmpty(), "domain XML %s has no <name>", file)
	dom := &Domain{Name: x.Name, l: l}
	if len(x.Serials) > 0 {
		dom.Console = x.Serials[0].Source.Path
	}
	_, err = os.Lstat(dom.QEMULog())
	hadLog := err == nil
	r := l.Virsh("define", file)
	ginkgo.DeferCleanup(func() { dom.remove(hadLog) })
	gomega.Expect(r.ExitCode).To(gomega.Equal(0), "%s", r)
	return dom
}

// Start starts the domain (virsh start) and records its QEMU's pid. A
// failure shows virsh's error, which carries a failed hook's message, and
// libvirt's QEMU log.
func (dom *Domain) Start() {
	ginkgo.GinkgoHelper()
	r := dom.l.Virsh("start", dom.Name)
	gomega.Expect(r.ExitCode).To(gomega.Equal(0), "%s\nQEMU log %s:\n%s", r, dom.QEMULog(), readFile(dom.QEMULog()))
	dom.pid = readPID(filepath.Join(libvirtQEMURun, dom.Name+".pid"))
	gomega.Expect(dom.pid).To(gomega.BeNumerically(">", 0), "libvirt should record the pid of the domain's QEMU")
	startedQEMU(dom.pid)
}

// State is the domain's state as virsh domstate prints it ("running",
// "shut off", ...).
func (dom *Domain) State() string {
	ginkgo.GinkgoHelper()
	return strings.TrimSpace(dom.l.VirshOK("domstate", dom.Name))
}

// WaitState waits up to timeout for the domain to reach state.
func (dom *Domain) WaitState(state string, timeout time.Duration) {
	ginkgo.GinkgoHelper()
	gomega.Eventually(dom.State).WithTimeout(timeout).WithPolling(250*time.Millisecond).Should(gomega.Equal(state),
		"domain %s should reach state %q\nconsole:\n%s", dom.Name, state, readFile(dom.Console))
}

// QEMURunning reports whether the QEMU that Start recorded still runs.
func (dom *Domain) QEMURunning() bool { return qemuAlive(dom.pid) }

// QEMULog is the file where libvirt keeps the domain's QEMU command line and
// stderr.
func (dom *Domain) QEMULog() string { return filepath.Join(libvirtQEMULogs, dom.Name+".log") }

// remove is Define's cleanup; hadLog tells whether the QEMU log predates
// the spec.
func (dom *Domain) remove(hadLog bool) {
	ginkgo.GinkgoHelper()
	if ginkgo.CurrentSpecReport().Failed() {
		fmt.Fprintf(ginkgo.GinkgoWriter, "QEMU log %s:\n%s\nconsole %s:\n%s\n",
			dom.QEMULog(), readFile(dom.QEMULog()), dom.Console, readFile(dom.Console))
	}
	if r := dom.l.Virsh("domstate", dom.Name); r.ExitCode == 0 && strings.TrimSpace(r.Stdout) != "shut off" {
		if r := dom.l.Virsh("destroy", dom.Name); r.ExitCode != 0 {
			fmt.Fprintf(ginkgo.GinkgoWriter, "destroying domain %s: %s\n", dom.Name, r)
		}
	}
	r := dom.l.Virsh("undefine", dom.Name)
	if r.ExitCode != 0 && !strings.Contains(r.Stderr, "failed to get domain") {
		gomega.Expect(r.ExitCode).To(gomega.Equal(0), "undefining domain %s: %s", dom.Name, r)
	}
	if dom.QEMURunning() {
		_ = syscall.Kill(dom.pid, syscall.SIGKILL)
	}
	gomega.Eventually(dom.QEMURunning).WithTimeout(domainStopTimeout).WithPolling(50*time.Millisecond).Should(gomega.BeFalse(),
		"QEMU of domain %s (pid %d) is still running", dom.Name, dom.pid)
	if !hadLog {
		gomega.Expect(os.Remove(dom.QEMULog())).To(gomega.Or(gomega.Succeed(), gomega.MatchError(fs.ErrNotExist)))
	}
}

// AllowTraverse lets every user search each directory on path's way from
// the root (o+x, no listing), for the spec's duration. libvirt runs QEMU as
// its own user (libvirt-qemu on Debian), which must reach the endpoint
// sockets and the guest image below the suite's private (0700) temporary
// directories. The old modes come back when the spec ends.
func AllowTraverse(path string) {
	ginkgo.GinkgoHelper()
	abs, err := filepath.Abs(path)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	for dir := abs; ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		if mode := fi.Mode().Perm(); fi.IsDir() && mode&0o001 == 0 {
			gomega.Expect(os.Chmod(dir, mode|0o001)).To(gomega.Succeed())
			ginkgo.DeferCleanup(func() {
				// Gone already (a daemon's removed directory) is fine.
				err := os.Chmod(dir, mode)
				gomega.Expect(err).To(gomega.Or(gomega.Succeed(), gomega.MatchError(fs.ErrNotExist)))
			})
		}
		if dir == filepath.Dir(dir) {
			return
		}
	}
}

// processesNamed lists the running processes whose command name
// (/proc/PID/comm) is one of names.
func processesNamed(names ...string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm := strings.TrimSpace(readFile(filepath.Join("/proc", e.Name(), "comm")))
		for _, n := range names {
			if comm == n && !zombie(pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
