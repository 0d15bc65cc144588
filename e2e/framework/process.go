package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// DefaultTimeout bounds every child process the framework waits for. It is a
// deadlock guard, not a performance assertion: far longer than any spec needs
// even on a loaded 2-core machine.
const DefaultTimeout = 2 * time.Minute

// ConvergeTimeout bounds a wait for state to converge (a guest joining, a
// policy switch taking effect at a period's end, a controller sync or a
// host marked down): a deadlock guard, long enough for a loaded 2-core
// machine, never what a spec asserts. Gomega's default of a second is
// not.
const ConvergeTimeout = 30 * time.Second

// Result is how a finished child process ended.
type Result struct {
	Args     []string
	Stdout   string
	Stderr   string
	ExitCode int // -1 when a signal ended the process
	Wall     time.Duration
}

func (r Result) String() string {
	return fmt.Sprintf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.Args, " "), r.ExitCode, r.Stdout, r.Stderr)
}

// Proc is a child process started by the framework.
type Proc struct {
	cmd    *exec.Cmd
	start  time.Time
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan struct{}
	res    Result
}

// start runs path with args as a child process whose output is captured.
// DeferCleanup kills it if it is still running when the spec ends, and
// always reaps it, so a failing spec leaves no process behind.
func start(path string, args ...string) *Proc {
	ginkgo.GinkgoHelper()
	return startWith(nil, path, args...)
}

// startWith is start with setup, when not nil, changing the command first.
func startWith(setup func(*exec.Cmd), path string, args ...string) *Proc {
	ginkgo.GinkgoHelper()
	p := &Proc{cmd: exec.Command(path, args...), done: make(chan struct{})}
	p.cmd.Env = cleanEnv()
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = sysProcAttr()
	if setup != nil {
		setup(p.cmd)
	}
	p.res.Args = append([]string{path}, args...)
	p.start = time.Now()
	gomega.Expect(p.cmd.Start()).To(gomega.Succeed(), "starting %s", path)
	go func() {
		err := p.cmd.Wait()
		p.res.Wall = time.Since(p.start)
		p.res.Stdout, p.res.Stderr = p.stdout.String(), p.stderr.String()
		p.res.ExitCode = p.cmd.ProcessState.ExitCode()
		if err != nil && p.res.ExitCode == 0 {
			p.res.ExitCode = -1
		}
		close(p.done)
	}()
	ginkgo.DeferCleanup(func() {
		if !p.Exited() {
			_ = p.cmd.Process.Kill()
		}
		<-p.done
	})
	return p
}

// cleanEnv is the test's environment without SLUICE_* variables, so that a
// developer's settings cannot redirect the binaries under test.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			env = append(env, kv)
		}
	}
	return env
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended and been reaped.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process if it is still running.
func (p *Proc) Signal(sig syscall.Signal) {
	ginkgo.GinkgoHelper()
	if !p.Exited() {
		gomega.Expect(p.cmd.Process.Signal(sig)).To(gomega.Or(gomega.Succeed(), gomega.MatchError(os.ErrProcessDone)))
	}
}

// Wait waits for the process to end, at most DefaultTimeout; past that it
// kills the process and fails the spec.
func (p *Proc) Wait() Result {
	ginkgo.GinkgoHelper()
	return p.WaitTimeout(DefaultTimeout)
}

// WaitTimeout is Wait with another deadlock guard.
func (p *Proc) WaitTimeout(d time.Duration) Result {
	ginkgo.GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	select {
	case <-p.done:
		return p.res
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	ginkgo.Fail(fmt.Sprintf("%s did not exit within %s; killed it\n%s", p.res.Args[0], d, p.res))
	return p.res
}

// Run runs path with args to completion and returns how it ended.
func Run(path string, args ...string) Result {
	ginkgo.GinkgoHelper()
	return start(path, args...).Wait()
}
