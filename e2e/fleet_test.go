package e2e

import (
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// A fleet of one: sluice-controller, a sluiced that joined it with a host
// token, sluicectl as an operator and as a tenant.
var _ = Describe("a fleet", Label("process"), func() {
	BeforeEach(framework.RequiresLinux)

	It("places the controller's VMs on the host, applies changes in place, bills usage once across restarts, and marks a silent host down", func() {
		ctl := framework.StartController("--heartbeat-timeout", "2s")
		hostToken := ctl.Token("gpu1-sluiced", "host", "gpu1")
		join := []string{"--controller", ctl.URL, "--controller-token", hostToken, "--controller-host", "gpu1",
			"--controller-gpus", "sim:4GiB", "--controller-interval", "200ms"}
		d := framework.StartDaemon(framework.DaemonOptions{ExtraArgs: join})
		alice := ctl.Token("alice", "tenant", "acme")

		By("the host registered with its GPU")
		var gpus []controllerapi.GPU
		ctl.CtlJSON(&gpus, ctl.Operator, "gpu", "list")
		Expect(gpus).To(HaveLen(1))
		Expect(gpus[0].Host).To(Equal("gpu1"))
		Expect(gpus[0].MemoryBytes).To(Equal(int64(4 << 30)))

		By("a tenant's VM is placed there and sluiced creates it")
		var vm controllerapi.VM
		ctl.CtlJSON(&vm, alice, "vm", "create", "web", "--tenant", "acme", "--weight", "2", "--memory", "1GiB")
		Expect(vm.Host).To(Equal("gpu1"))
		Eventually(func() []hostapi.VM { return d.ListVMs() }).WithTimeout(framework.ConvergeTimeout).Should(HaveLen(1))
		local := d.GetVM("web")
		Expect(local.Weight).To(Equal(uint32(2)))
		Expect(local.Memory).To(Equal(uint64(1 << 30)))

		By("a change at run time is applied to the same VM, not a new one")
		ctl.CtlOK(alice, "vm", "set", "web", "--weight", "5", "--cap", "50%")
		Eventually(func() uint32 { return d.GetVM("web").Weight }).WithTimeout(framework.ConvergeTimeout).Should(Equal(uint32(5)))
		changed := d.GetVM("web")
		Expect(changed.ID).To(Equal(local.ID))
		Expect(changed.Endpoint).To(Equal(local.Endpoint))
		Expect(changed.Cap).To(Equal(0.5))

		By("the VM's GPU time reaches the controller, exactly")
		d.Throttle(local.Endpoint, 100*time.Microsecond, 200)
		ledger := d.Usage("web").GPUNs
		Expect(ledger).NotTo(BeZero())
		billed := func() int64 {
			var rep controllerapi.UsageReport
			ctl.CtlJSON(&rep, alice, "usage", "--vm", "web")
			return rep.TotalGpuNs
		}
		Eventually(billed).WithTimeout(framework.ConvergeTimeout).Should(Equal(int64(ledger)))

		By("a restart of sluiced bills nothing twice")
		d.Stop()
		d = framework.StartDaemon(framework.DaemonOptions{Dir: d.Dir, ExtraArgs: join})
		Consistently(billed).WithTimeout(time.Second).Should(Equal(int64(ledger)))
		Expect(d.GetVM("web").Weight).To(Equal(uint32(5)))

		By("a restart of the controller on its database loses nothing")
		ctl.Stop()
		ctl.Restart()
		Expect(billed()).To(Equal(int64(ledger)))
		d.Throttle(local.Endpoint, 100*time.Microsecond, 100)
		ledger = d.Usage("web").GPUNs
		Eventually(billed).WithTimeout(framework.ConvergeTimeout).Should(Equal(int64(ledger)))

		By("a silent host is marked down and its VMs flagged; its heartbeat brings it back")
		d.Stop()
		flagged := func() bool {
			var v controllerapi.VM
			ctl.CtlJSON(&v, alice, "vm", "get", "web")
			return v.HostDown
		}
		Eventually(flagged).WithTimeout(framework.ConvergeTimeout).Should(BeTrue())
		var hosts []controllerapi.Host
		ctl.CtlJSON(&hosts, ctl.Operator, "host", "list")
		Expect(hosts).To(HaveLen(1))
		Expect(hosts[0].State).To(Equal(controllerapi.Down))
		d = framework.StartDaemon(framework.DaemonOptions{Dir: d.Dir, ExtraArgs: join})
		Eventually(flagged).WithTimeout(framework.ConvergeTimeout).Should(BeFalse())

		By("a VM deleted at the controller leaves the host; its usage stays billed")
		ctl.CtlOK(alice, "vm", "delete", "web")
		Eventually(func() []hostapi.VM { return d.ListVMs() }).WithTimeout(framework.ConvergeTimeout).Should(BeEmpty())
		Expect(billed()).To(Equal(int64(ledger)))

		By("the audit log names who did what")
		var evs []controllerapi.Event
		ctl.CtlJSON(&evs, ctl.Operator, "events")
		var actions []string
		for _, e := range evs {
			actions = append(actions, e.Action)
		}
		Expect(actions).To(ContainElements("vm.create", "vm.update", "vm.delete", "host.down", "host.register"))
	})
})
