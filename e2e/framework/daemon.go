package framework

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// Clocks of the simulated backend (sluiced --clock).
const (
	ClockWall    = "wall"
	ClockVirtual = "virtual"
)

// readyTimeout bounds the wait for a new daemon to answer; stopTimeout its
// shutdown. Both are deadlock guards.
const (
	readyTimeout = 30 * time.Second
	stopTimeout  = 30 * time.Second
)

// DaemonOptions configure StartDaemon. The zero value runs the sim backend
// on the wall clock in a new temporary directory.
type DaemonOptions struct {
	// Dir holds the host API socket (sluiced.sock), the endpoint sockets
	// (vms/) and, unless StateDir is set, the state (state/). Default: a new
	// temporary directory, removed when the spec ends. Pass the Dir of a
	// stopped daemon to restart it in place.
	Dir string
	// StateDir is --state-dir. Default: Dir/state.
	StateDir string
	// Backend is --backend. Default: sim.
	Backend string
	// Clock is --clock: ClockWall (default) or ClockVirtual.
	Clock string
	// ExtraArgs are appended to sluiced's command line.
	ExtraArgs []string
	// FDStore, optional, runs sluiced as systemd would with an fd store:
	// it stores its VMs' descriptors there and is given back what it
	// holds at start.
	FDStore *FDStore
}

// Daemon is a running sluiced.
type Daemon struct {
	Dir      string
	Socket   string
	StateDir string
	Clock    string
	proc     *Proc
	stopped  bool
}

// StartDaemon starts sluiced with opts and waits until `sluicectl version`
// gets an answer. When the spec ends the daemon is stopped (see Stop) if it
// still runs; a temporary Dir it created is then removed.
func StartDaemon(opts DaemonOptions) *Daemon {
	ginkgo.GinkgoHelper()
	d := &Daemon{Dir: opts.Dir, StateDir: opts.StateDir, Clock: opts.Clock}
	if d.Dir == "" {
		dir, err := mkdirTemp("sluice-e2e-")
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		d.Dir = dir
		ginkgo.DeferCleanup(os.RemoveAll, dir)
		// Every VM's system-call proxy runs as an unprivileged id range and
		// must reach its volume (default STATE_DIR/volumes/NAME) below
		// Dir: sluiced refuses a volume whose path others cannot search.
		// o+x only: nobody can list Dir.
		gomega.Expect(os.Chmod(dir, 0o711)).To(gomega.Succeed())
	}
	if d.StateDir == "" {
		d.StateDir = filepath.Join(d.Dir, "state")
	}
	if d.Clock == "" {
		d.Clock = ClockWall
	}
	backend := opts.Backend
	if backend == "" {
		backend = "sim"
	}
	d.Socket = filepath.Join(d.Dir, "sluiced.sock")
	args := []string{"--socket", d.Socket, "--state-dir", d.StateDir, "--backend", backend,
		"--clock", d.Clock, "--log-level", "warn"}
	if opts.FDStore != nil {
		d.proc = opts.FDStore.startStored(Bins().Sluiced, append(args, opts.ExtraArgs...)...)
	} else {
		d.proc = start(Bins().Sluiced, append(args, opts.ExtraArgs...)...)
	}
	ginkgo.DeferCleanup(func() {
		if !d.stopped {
			d.Stop()
		}
	})
	d.waitReady()
	return d
}

// waitReady polls `sluicectl version` until it succeeds, giving up at once
// if the daemon exits.
func (d *Daemon) waitReady() {
	ginkgo.GinkgoHelper()
	gomega.Eventually(func() error {
		r := d.Ctl("version")
		if r.ExitCode == 0 {
			return nil
		}
		if d.proc.Exited() {
			return gomega.StopTrying("sluiced exited before it answered\n" + d.proc.res.String())
		}
		return errors.New(r.String())
	}).WithTimeout(readyTimeout).WithPolling(50 * time.Millisecond).Should(gomega.Succeed())
}

// Pid is the daemon's process id.
func (d *Daemon) Pid() int { return d.proc.Pid() }

// Stop sends SIGTERM, waits for the daemon to exit and asserts it exited
// with status 0 and removed every socket it had created under Dir.
func (d *Daemon) Stop() {
	ginkgo.GinkgoHelper()
	d.stopped = true
	d.proc.Signal(syscall.SIGTERM)
	r := d.proc.WaitTimeout(stopTimeout)
	if r.Stderr != "" {
		fmt.Fprintf(ginkgo.GinkgoWriter, "sluiced (pid %d) stderr:\n%s", d.proc.Pid(), r.Stderr)
	}
	gomega.Expect(r.ExitCode).To(gomega.Equal(0), "sluiced should exit 0 on SIGTERM\n%s", r)
	gomega.Expect(Sockets(d.Dir)).To(gomega.BeEmpty(), "sluiced should remove its sockets on exit")
}

// Kill kills the daemon with SIGKILL (a crash) and reaps it; its sockets
// stay behind, as after a crash, for the next start to clear.
func (d *Daemon) Kill() {
	ginkgo.GinkgoHelper()
	d.stopped = true
	d.proc.Signal(syscall.SIGKILL)
	d.proc.WaitTimeout(stopTimeout)
}

// Sockets lists the UNIX socket files under dir.
func Sockets(dir string) []string {
	ginkgo.GinkgoHelper()
	var socks []string
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type()&fs.ModeSocket != 0 {
			socks = append(socks, path)
		}
		return nil
	})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return socks
}

// Ctl runs sluicectl against this daemon.
func (d *Daemon) Ctl(args ...string) Result {
	ginkgo.GinkgoHelper()
	return Ctl(d.Socket, args...)
}

// CtlOK runs sluicectl against this daemon, asserts it succeeded and
// returns its stdout.
func (d *Daemon) CtlOK(args ...string) string {
	ginkgo.GinkgoHelper()
	r := d.Ctl(args...)
	gomega.Expect(r.ExitCode).To(gomega.Equal(0), "%s", r)
	return r.Stdout
}

// CtlJSON runs sluicectl with args (which should ask for --json), asserts it
// succeeded and decodes its stdout into v.
func (d *Daemon) CtlJSON(v any, args ...string) {
	ginkgo.GinkgoHelper()
	out := d.CtlOK(args...)
	gomega.Expect(json.Unmarshal([]byte(out), v)).To(gomega.Succeed(), "decoding the output of sluicectl %v:\n%s", args, out)
}

// Ctl runs sluicectl with --socket socket; no daemon needs to listen there.
func Ctl(socket string, args ...string) Result {
	ginkgo.GinkgoHelper()
	return Run(Bins().Sluicectl, append([]string{"--socket", socket}, args...)...)
}

// Agent runs sluice-agent as a process guest of endpoint until it exits.
func (d *Daemon) Agent(endpoint string, args ...string) Result {
	ginkgo.GinkgoHelper()
	return d.StartAgent(endpoint, args...).Wait()
}

// StartAgent starts sluice-agent as a process guest of endpoint and returns
// at once; Wait for its result.
func (d *Daemon) StartAgent(endpoint string, args ...string) *Proc {
	ginkgo.GinkgoHelper()
	return start(Bins().Agent, append([]string{"--endpoint", endpoint}, args...)...)
}

// handoversRE reads the hand-overs sluicectl version reports.
var handoversRE = regexp.MustCompile(`hand-overs (\d+)`)

// Handovers is how many times the daemon handed itself over to a
// successor since it started (sluicectl version); -1 while it does not
// answer.
func (d *Daemon) Handovers() int {
	ginkgo.GinkgoHelper()
	r := d.Ctl("version")
	if r.ExitCode != 0 {
		return -1
	}
	m := handoversRE.FindStringSubmatch(r.Stdout)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// HandOver sends SIGHUP, on which sluiced hands its VMs over to a
// successor (itself re-executed, the same pid), and waits until the
// successor answers. It returns how long that took, as sluicectl sees it.
func (d *Daemon) HandOver() time.Duration {
	ginkgo.GinkgoHelper()
	want := d.Handovers() + 1
	gomega.Expect(want).To(gomega.BeNumerically(">", 0), "sluiced answers before the hand-over")
	start := time.Now()
	d.proc.Signal(syscall.SIGHUP)
	gomega.Eventually(func() error {
		if d.proc.Exited() {
			return gomega.StopTrying("sluiced exited in the hand-over\n" + d.proc.res.String())
		}
		if n := d.Handovers(); n != want {
			return fmt.Errorf("%d hand-overs, want %d", n, want)
		}
		return nil
	}).WithTimeout(readyTimeout).WithPolling(20 * time.Millisecond).Should(gomega.Succeed())
	return time.Since(start)
}

// Restart stops the daemon with SIGTERM as systemd does for a restart and
// asserts it exited 0; unlike Stop it lets sockets stay (a daemon with an
// fd store leaves its VMs to it). Start the next one with StartDaemon.
func (d *Daemon) Restart() {
	ginkgo.GinkgoHelper()
	d.stopped = true
	d.proc.Signal(syscall.SIGTERM)
	r := d.proc.WaitTimeout(stopTimeout)
	gomega.Expect(r.ExitCode).To(gomega.Equal(0), "sluiced should exit 0 on SIGTERM\n%s", r)
}
