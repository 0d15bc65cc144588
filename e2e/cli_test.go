package e2e

import (
	"net"
	"path/filepath"
	"strings"

	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("sluicectl errors", Label("process"), func() {
	BeforeEach(framework.RequiresLinux)

	Context("with a daemon", func() {
		var d *framework.Daemon
		BeforeEach(func() {
			d = framework.StartDaemon(framework.DaemonOptions{Clock: framework.ClockVirtual})
		})

		It("refuses to create a VM whose name exists", func() {
			vm := d.CreateVM(framework.NewVM("twice", framework.WithChannels(1), framework.WithWeight(2)))
			r := d.Ctl("vm", "create", "twice", "--weight", "5")
			Expect(r.ExitCode).NotTo(BeZero(), "%s", r)
			Expect(r.Stderr).To(ContainSubstring("exists"))
			got := d.GetVM("twice")
			// The system-call counters are live (the proxy starts after
			// create returns): compare the VM's settings only.
			got.Syscalls, vm.Syscalls = nil, nil
			Expect(got).To(Equal(vm), "the existing VM is untouched")
		})

		DescribeTable("rejects a bad VM name",
			func(name string, wantExit int, wantMsg string) {
				r := d.Ctl("vm", "create", "--", name)
				Expect(r.ExitCode).To(Equal(wantExit), "%s", r)
				Expect(r.Stderr).To(ContainSubstring(wantMsg))
				Expect(r.Stdout).To(BeEmpty())
				Expect(d.ListVMs()).To(BeEmpty())
				Expect(framework.Sockets(filepath.Join(d.Dir, "vms"))).To(BeEmpty(), "no endpoint for a rejected VM")
			},
			Entry("with a space and punctuation", "bad name!", 1, "invalid"),
			Entry("starting with an underscore", "_x", 1, "invalid"),
			Entry("starting with a dash", "-x", 1, "invalid"),
			Entry("with a slash", "../escape", 1, "invalid"),
			Entry("of 64 characters", strings.Repeat("a", 64), 1, "invalid"),
			Entry("empty (a usage error)", "", 2, "must not be empty"),
		)
	})

	DescribeTable("explains that no daemon listens on the socket",
		func(makeSocket func(dir string) string) {
			socket := makeSocket(GinkgoT().TempDir())
			r := framework.Ctl(socket, "vm", "list")
			Expect(r.ExitCode).To(Equal(1), "%s", r)
			Expect(r.Stderr).To(ContainSubstring("cannot reach sluiced"))
			Expect(r.Stderr).To(ContainSubstring(socket))
			Expect(r.Stderr).To(ContainSubstring("--socket"), "the message says how to point elsewhere")
		},
		Entry("no socket file", func(dir string) string { return filepath.Join(dir, "none.sock") }),
		Entry("a stale socket file", func(dir string) string {
			path := filepath.Join(dir, "stale.sock")
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
			Expect(err).NotTo(HaveOccurred())
			l.SetUnlinkOnClose(false) // leave the file, as a crashed daemon would
			Expect(l.Close()).To(Succeed())
			Expect(framework.IsSocket(path)).To(BeTrue())
			return path
		}),
	)
})
