package e2e

import (
	"net"
	"os"
	"path/filepath"

	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// freePort is a TCP address on the loopback nobody listens on now.
func freePort() string {
	GinkgoHelper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	addr := ln.Addr().String()
	Expect(ln.Close()).To(Succeed())
	return addr
}

var _ = Describe("The host API over TCP", Label("process"), func() {
	BeforeEach(framework.RequiresLinux)

	It("serves sluicectl with the token, and nothing without it", func() {
		dir := GinkgoT().TempDir()
		token, wrong := filepath.Join(dir, "host.token"), filepath.Join(dir, "wrong.token")
		Expect(os.WriteFile(token, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)).To(Succeed())
		Expect(os.WriteFile(wrong, []byte("fedcba9876543210fedcba9876543210\n"), 0o600)).To(Succeed())
		addr := freePort()
		d := framework.StartDaemon(framework.DaemonOptions{ExtraArgs: []string{"--listen", addr, "--listen-token-file", token}})
		d.CreateVM(framework.NewVM("overtcp"))

		r := framework.Run(framework.Bins().Sluicectl, "--socket", "tcp://"+addr, "--host-token-file", token, "vm", "list")
		Expect(r.ExitCode).To(BeZero(), "%s", r)
		Expect(r.Stdout).To(ContainSubstring("overtcp"))

		r = framework.Run(framework.Bins().Sluicectl, "--socket", "tcp://"+addr, "--host-token-file", wrong, "vm", "list")
		Expect(r.ExitCode).NotTo(BeZero(), "a wrong token: %s", r)
		Expect(r.Stderr).To(ContainSubstring("wrong bearer token"))
		Expect(r.Stdout).NotTo(ContainSubstring("overtcp"))
	})
})
