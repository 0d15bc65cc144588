package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Process guests", Label("process"), func() {
	BeforeEach(framework.RequiresLinux)

	It("accounts two concurrent guests with a 10x kernel-length skew exactly", func() {
		d := framework.StartDaemon(framework.DaemonOptions{Clock: framework.ClockWall})
		type guest struct {
			name    string
			kernel  time.Duration
			kernels int
		}
		guests := []guest{{"short", 100 * time.Microsecond, 300}, {"long", 1000 * time.Microsecond, 60}}
		endpoints := map[string]string{}
		procs := map[string]*framework.Proc{}
		for _, g := range guests {
			endpoints[g.name] = d.CreateVM(framework.NewVM(g.name, framework.WithChannels(1))).Endpoint
		}
		for _, g := range guests {
			procs[g.name] = d.StartAgent(endpoints[g.name], framework.ThrottleArgs(g.kernel, g.kernels)...)
		}

		for _, g := range guests {
			By("checking VM " + g.name)
			res := framework.Decode[framework.ThrottleResult](procs[g.name].Wait())
			want := uint64(g.kernels) * uint64(g.kernel.Nanoseconds())
			Expect(res.Kernels).To(Equal(uint64(g.kernels)))
			Expect(res.Errors).To(BeZero())
			Expect(res.SubmittedGPUNs).To(Equal(want))

			u := d.Usage(g.name)
			Expect(u.Name).To(Equal(g.name))
			Expect(u.Kernels).To(Equal(res.Kernels), "the mediator counts every kernel the guest completed")
			Expect(u.GPUNs).To(Equal(res.SubmittedGPUNs), "the sim accounts each kernel's length exactly")
			Expect(u.Commands).To(Equal(u.Kernels), "the throttle workload submits only kernels")
			Expect(u.Errors).To(BeZero())
		}

		vms := d.ListVMs()
		Expect(vms).To(HaveLen(2))
		for _, vm := range vms {
			Expect(vm.Endpoint).To(Equal(endpoints[vm.Name]), "vm list names %q", vm.Name)
		}

		out := d.CtlOK("top", "--once", "--interval", "200ms")
		Expect(out).To(ContainSubstring("backend: sim"))
		Expect(out).To(ContainSubstring("clock: wall"))
		rows := framework.TopRows(out)
		for _, g := range guests {
			Expect(rows).To(HaveKey(g.name), "top should show VM %s:\n%s", g.name, out)
			Expect(rows[g.name]).To(ContainElement(strconv.Itoa(g.kernels)), "top should show %s's kernel count:\n%s", g.name, out)
		}
	})

	It("keeps usage and the VM list across a daemon restart", func() {
		const kernel = 100 * time.Microsecond
		d := framework.StartDaemon(framework.DaemonOptions{Clock: framework.ClockVirtual})
		vm := d.CreateVM(framework.NewVM("durable", framework.WithChannels(1), framework.WithWeight(3)))
		Expect(d.Throttle(vm.Endpoint, kernel, 50).Kernels).To(Equal(uint64(50)))
		epoch := daemonEpoch(d)
		before := d.Usage("durable")
		Expect(before.Kernels).To(Equal(uint64(50)))

		d.Stop() // asserts exit status 0 and no sockets left
		Expect(framework.IsSocket(vm.Endpoint)).To(BeFalse())

		d2 := framework.StartDaemon(framework.DaemonOptions{Dir: d.Dir, StateDir: d.StateDir, Clock: framework.ClockVirtual})
		Expect(daemonEpoch(d2)).NotTo(Equal(epoch), "a restarted daemon has a new epoch")
		Expect(d2.Usage("durable")).To(Equal(before))

		vms := d2.ListVMs()
		Expect(vms).To(HaveLen(1))
		Expect(vms[0].Name).To(Equal("durable"))
		Expect(vms[0].Weight).To(Equal(uint32(3)))
		Expect(vms[0].Channels).To(Equal(1))
		Expect(framework.IsSocket(vms[0].Endpoint)).To(BeTrue(), "the restored VM has an endpoint again")

		Expect(d2.Throttle(vms[0].Endpoint, kernel, 30).Kernels).To(Equal(uint64(30)))
		after := d2.Usage("durable")
		Expect(after.Kernels).To(Equal(uint64(80)))
		Expect(after.GPUNs).To(Equal(uint64(80 * kernel.Nanoseconds())))
		Expect(after.Since).To(Equal(before.Since), "the record continues, it does not restart")
	})

	It("removes a deleted VM's endpoint but keeps its usage", func() {
		const kernel = 200 * time.Microsecond
		d := framework.StartDaemon(framework.DaemonOptions{Clock: framework.ClockVirtual})
		vm := d.CreateVM(framework.NewVM("gone", framework.WithChannels(1)))
		d.CreateVM(framework.NewVM("stays", framework.WithChannels(1)))
		d.Throttle(vm.Endpoint, kernel, 25)

		Expect(d.CtlOK("vm", "delete", "gone")).To(ContainSubstring("deleted"))
		Expect(vm.Endpoint).NotTo(BeAnExistingFile(), "the endpoint socket is removed")

		u := d.Usage("gone")
		Expect(u.Kernels).To(Equal(uint64(25)))
		Expect(u.GPUNs).To(Equal(uint64(25 * kernel.Nanoseconds())))

		r := d.Ctl("vm", "get", "gone")
		Expect(r.ExitCode).To(Equal(1), "%s", r)
		Expect(r.Stderr).To(ContainSubstring("not found"))
		Expect(r.Stdout).To(BeEmpty())

		r = d.Ctl("vm", "delete", "gone")
		Expect(r.ExitCode).To(Equal(1), "%s", r)
		Expect(r.Stderr).To(ContainSubstring("not found"))

		vms := d.ListVMs()
		Expect(vms).To(HaveLen(1))
		Expect(vms[0].Name).To(Equal("stays"))
	})

	It("runs simulated GPU time faster than real time on the virtual clock", func() {
		const kernel, n = 1000 * time.Microsecond, 2000
		d := framework.StartDaemon(framework.DaemonOptions{Clock: framework.ClockVirtual})
		Expect(d.CtlOK("version")).To(ContainSubstring("clock virtual"))
		vm := d.CreateVM(framework.NewVM("virt", framework.WithChannels(1)))

		r := d.Agent(vm.Endpoint, framework.ThrottleArgs(kernel, n)...)
		res := framework.Decode[framework.ThrottleResult](r)
		Expect(res.Kernels).To(Equal(uint64(n)))
		Expect(res.Errors).To(BeZero())

		u := d.Usage("virt")
		Expect(u.Kernels).To(Equal(uint64(n)))
		Expect(u.GPUNs).To(Equal(uint64(2*time.Second)), "2000 kernels of 1 ms are exactly 2 s of GPU time")
		Expect(u.Errors).To(BeZero())

		// Not asserted: wall time depends on the machine's load.
		msg := fmt.Sprintf("%d kernels, %s of simulated GPU time in %s wall (agent process), %s measured by the agent",
			n, time.Duration(u.GPUNs), r.Wall.Round(time.Millisecond), time.Duration(res.ElapsedNs).Round(time.Millisecond))
		AddReportEntry("virtual clock", msg)
	})

	It("measures NOP round trips on the virtual clock", func() {
		const count, warmup = 2000, 100
		d := framework.StartDaemon(framework.DaemonOptions{Clock: framework.ClockVirtual})
		vm := d.CreateVM(framework.NewVM("lat", framework.WithChannels(1)))

		r := d.Agent(vm.Endpoint, "run", "latency", "--count", strconv.Itoa(count), "--warmup", strconv.Itoa(warmup), "--json")
		res := framework.Decode[framework.LatencyResult](r)
		Expect(res.Workload).To(Equal("latency"))
		Expect(res.Count).To(Equal(count))
		rt := res.RoundTrip
		Expect(rt.P50).To(BeNumerically(">", 0))
		Expect(rt.P90).To(BeNumerically(">=", rt.P50))
		Expect(rt.P99).To(BeNumerically(">=", rt.P90))
		Expect(rt.Max).To(BeNumerically(">=", rt.P99))

		u := d.Usage("lat")
		Expect(u.Commands).To(Equal(uint64(count+warmup)), "one NOP per round trip, warm-up included")
		Expect(u.Kernels).To(BeZero())
		Expect(u.Errors).To(BeZero())

		// Not asserted: latency depends on the machine's load.
		msg := fmt.Sprintf("%d round trips: p50 %s, p90 %s, p99 %s, max %s, mean %s", res.Count,
			time.Duration(rt.P50), time.Duration(rt.P90), time.Duration(rt.P99), time.Duration(rt.Max), time.Duration(rt.Mean))
		AddReportEntry("latency", msg)
	})
})

var epochRE = regexp.MustCompile(`epoch (\d+)`)

// daemonEpoch is the epoch `sluicectl version` reports for the daemon.
func daemonEpoch(d *framework.Daemon) string {
	GinkgoHelper()
	out := d.CtlOK("version")
	m := epochRE.FindStringSubmatch(out)
	Expect(m).To(HaveLen(2), "sluicectl version should print the daemon's epoch:\n%s", out)
	return m[1]
}
