package framework

import (
	"os/exec"
	"syscall"

	"github.com/onsi/ginkgo/v2"
)

// StartAgentAs is StartAgent with the agent running as uid:gid instead of
// the test's user (root), for specs of who may open an endpoint.
func (d *Daemon) StartAgentAs(uid, gid uint32, endpoint string, args ...string) *Proc {
	ginkgo.GinkgoHelper()
	return startWith(func(c *exec.Cmd) {
		c.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: gid}
	}, Bins().Agent, append([]string{"--endpoint", endpoint}, args...)...)
}
