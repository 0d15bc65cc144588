package framework

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// Controller is a running sluice-controller on a SQLite or a PostgreSQL
// database.
type Controller struct {
	Addr     string
	URL      string
	Operator string // the bootstrap operator token
	DB       string // the SQLite file; "" on PostgreSQL
	DBArg    string // --db
	Args     []string
	proc     *Proc
	stopped  bool
}

// StartController starts sluice-controller on a free loopback port and a
// new database, with a bootstrap operator token and args, and waits until
// it answers. It is stopped when the spec ends.
func StartController(args ...string) *Controller {
	ginkgo.GinkgoHelper()
	dir, err := mkdirTemp("sluice-e2e-ctl-")
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(os.RemoveAll, dir)
	db := filepath.Join(dir, "controller.db")
	c := StartControllerOn("sqlite:"+db, args...)
	c.DB = db
	return c
}

// StartControllerOn is StartController on database db (a --db: sqlite:PATH
// or postgres://...).
func StartControllerOn(db string, args ...string) *Controller {
	ginkgo.GinkgoHelper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	addr := ln.Addr().String()
	ln.Close()
	c := &Controller{Addr: addr, URL: "http://" + addr, Operator: "e2e-operator-secret-0123456789",
		DBArg: db, Args: args}
	c.run()
	return c
}

// Restart starts a stopped controller again on its address and database.
func (c *Controller) Restart() {
	ginkgo.GinkgoHelper()
	gomega.Expect(c.stopped).To(gomega.BeTrue(), "restart a stopped controller")
	c.stopped = false
	c.run()
}

func (c *Controller) run() {
	ginkgo.GinkgoHelper()
	c.proc = start(Bins().Controller, append([]string{"--listen", c.Addr, "--db", c.DBArg,
		"--bootstrap-token", c.Operator, "--log-level", "warn"}, c.Args...)...)
	ginkgo.DeferCleanup(func() {
		if !c.stopped {
			c.Stop()
		}
	})
	gomega.Eventually(func() error {
		r := c.Ctl(c.Operator, "whoami")
		if r.ExitCode == 0 {
			return nil
		}
		if c.proc.Exited() {
			return gomega.StopTrying("sluice-controller exited before it answered\n" + c.proc.res.String())
		}
		return errors.New(r.String())
	}).WithTimeout(readyTimeout).WithPolling(50 * time.Millisecond).Should(gomega.Succeed())
}

// Stop sends SIGTERM and asserts the controller exits 0.
func (c *Controller) Stop() {
	ginkgo.GinkgoHelper()
	c.stopped = true
	c.proc.Signal(syscall.SIGTERM)
	r := c.proc.WaitTimeout(stopTimeout)
	if r.Stderr != "" {
		fmt.Fprintf(ginkgo.GinkgoWriter, "sluice-controller stderr:\n%s", r.Stderr)
	}
	gomega.Expect(r.ExitCode).To(gomega.Equal(0), "sluice-controller should exit 0 on SIGTERM\n%s", r)
}

// Kill kills the controller with SIGKILL (a crash) and reaps it.
func (c *Controller) Kill() {
	ginkgo.GinkgoHelper()
	c.stopped = true
	c.proc.Signal(syscall.SIGKILL)
	c.proc.WaitTimeout(stopTimeout)
}

// Ctl runs sluicectl against the controller with token.
func (c *Controller) Ctl(token string, args ...string) Result {
	ginkgo.GinkgoHelper()
	return Run(Bins().Sluicectl, append([]string{"--controller", c.URL, "--token", token}, args...)...)
}

// CtlOK is Ctl asserting success; it returns stdout.
func (c *Controller) CtlOK(token string, args ...string) string {
	ginkgo.GinkgoHelper()
	r := c.Ctl(token, args...)
	gomega.Expect(r.ExitCode).To(gomega.Equal(0), "%s", r)
	return r.Stdout
}

// CtlJSON is CtlOK (with --json added) decoding stdout into v.
func (c *Controller) CtlJSON(v any, token string, args ...string) {
	ginkgo.GinkgoHelper()
	out := c.CtlOK(token, append(args, "--json")...)
	gomega.Expect(json.Unmarshal([]byte(out), v)).To(gomega.Succeed(), "decoding sluicectl %v:\n%s", args, out)
}

// Token creates a token (name, role, and --tenant or --host as scope) and
// returns its secret.
func (c *Controller) Token(name, role, scope string) string {
	ginkgo.GinkgoHelper()
	args := []string{"token", "create", name, "--role", role}
	switch role {
	case "tenant":
		args = append(args, "--tenant", scope)
	case "host":
		args = append(args, "--host", scope)
	}
	return strings.TrimSpace(c.CtlOK(c.Operator, args...))
}
