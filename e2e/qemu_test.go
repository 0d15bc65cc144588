package e2e

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("QEMU guests", Label("qemu"), func() {
	BeforeEach(framework.RequiresQEMU)

	It("boots a guest whose doorbells reach the mediator through the ivshmem device", func() {
		d := framework.StartDaemon(framework.DaemonOptions{})
		g := d.StartGuest("vm1")
		AddReportEntry("boot", fmt.Sprintf("%s guest: vm start to agent answering %.2f s", g.Accel, g.BootSeconds))
		Expect(g.Agent).To(HavePrefix("sluice-agent "))

		var vm hostapi.VM
		d.CtlJSON(&vm, "vm", "get", "vm1", "--json")
		Expect(vm.Peers).To(Equal(1), "QEMU joined the endpoint")
		// The guest's agent reads the ABI version the mediator wrote in the region.
		Expect(g.Exec("info").Stdout).To(ContainSubstring(fmt.Sprintf("ABI          %d.%d", abi.VersionMajor, abi.VersionMinor)))

		const n = 5000
		lat := framework.Decode[framework.LatencyResult](g.Exec("run", "latency", "--count", fmt.Sprint(n), "--json"))
		Expect(lat.Count).To(Equal(n))
		Expect(lat.RoundTrip.P50).To(BeNumerically(">", 0))
		AddReportEntry("round trip", fmt.Sprintf("%s guest, %d NOP round trips: p50 %v p99 %v",
			g.Accel, n, time.Duration(lat.RoundTrip.P50), time.Duration(lat.RoundTrip.P99)))
		u := d.Usage("vm1")
		Expect(u.Commands).To(BeNumerically(">=", n), "every NOP went through the mediator")
		Expect(u.Errors).To(BeZero())

		before := d.Usage("vm1")
		res := framework.Decode[framework.ThrottleResult](g.Exec("throttle", "--kernel", "100us", "--kernels", "500", "--json"))
		Expect(res.Kernels).To(Equal(uint64(500)))
		after := d.Usage("vm1")
		Expect(after.Kernels - before.Kernels).To(Equal(uint64(500)))
		Expect(after.GPUNs-before.GPUNs).To(Equal(res.SubmittedGPUNs), "the mediator accounts the guest's kernels exactly")

		bad := g.Exec("run", "throttle", "--kernel", "-1us")
		Expect(bad.ExitCode).To(Equal(1), "the agent's exit status comes back through vm exec")
		Expect(bad.Stderr).To(ContainSubstring("sluice-agent:"))

		Expect(g.Stop()).To(ContainSubstring("powered off"), "the guest stops on the ACPI power button")
		d.CtlJSON(&vm, "vm", "get", "vm1", "--json")
		Expect(vm.Peers).To(BeZero(), "QEMU left the endpoint")
	})

	It("hot-plugs the device into a running guest through QMP", func() {
		d := framework.StartDaemon(framework.DaemonOptions{})
		g := d.StartGuest("hot", "--hotplug")
		// A peer counts once it has read its whole handshake (ivshmem), which
		// QEMU does from its main loop after the device_add returns.
		Eventually(func() int {
			var vm hostapi.VM
			d.CtlJSON(&vm, "vm", "get", "hot", "--json")
			return vm.Peers
		}).WithTimeout(framework.ConvergeTimeout).WithPolling(20*time.Millisecond).Should(Equal(1), "the hot-plugged device joined the endpoint")
		res := framework.Decode[framework.ThrottleResult](g.Exec("throttle", "--kernel", "50us", "--kernels", "200", "--json"))
		Expect(res.Kernels).To(Equal(uint64(200)))
		Expect(d.Usage("hot").Kernels).To(Equal(uint64(200)))
	})

	It("shares the GPU equally between two guests with a 10x kernel-length skew under dfq, not under none", func() {
		d := framework.StartDaemon(framework.DaemonOptions{})
		// Each guest keeps about 30 ms of work in flight, so that each alone
		// saturates the GPU despite the completion latency of a TCG guest
		// (with 15 ms the short guest's share varied 45-50%).
		type guest struct {
			name, kernel, depth string
			g                   *framework.Guest
		}
		guests := []*guest{{name: "short", kernel: "100us", depth: "256"}, {name: "long", kernel: "1ms", depth: "32"}}
		for _, gu := range guests {
			gu.g = d.StartGuest(gu.name)
		}
		run := func(policy string, dur time.Duration) (short float64) {
			GinkgoHelper()
			d.CtlOK("policy", "set", policy)
			before := map[string]uint64{}
			for _, gu := range guests {
				before[gu.name] = d.Usage(gu.name).GPUNs
			}
			procs := map[string]*framework.Proc{}
			for _, gu := range guests {
				procs[gu.name] = gu.g.StartExec("throttle", "--kernel", gu.kernel, "--depth", gu.depth,
					"--duration", dur.String(), "--json")
			}
			used := map[string]float64{}
			var total float64
			for _, gu := range guests {
				res := framework.Decode[framework.ThrottleResult](procs[gu.name].Wait())
				Expect(res.Errors).To(BeZero())
				used[gu.name] = float64(d.Usage(gu.name).GPUNs - before[gu.name])
				total += used[gu.name]
			}
			Expect(total).To(BeNumerically(">", 0))
			share := used["short"] / total
			AddReportEntry("shares "+policy, fmt.Sprintf("policy %s over %v: short %.1f%%, long %.1f%%, GPU busy %.1f%%",
				policy, dur, 100*share, 100*(1-share), 100*total/float64(dur.Nanoseconds())))
			return share
		}
		By("policy none: the long-kernel guest takes most of the GPU")
		none := run("none", 10*time.Second)
		Expect(none).To(BeNumerically("<", 0.40), "without scheduling the short-kernel guest gets about 10%")
		By("policy dfq: equal shares within 5 points")
		dfq := run("dfq", 20*time.Second)
		Expect(math.Abs(dfq-0.5)).To(BeNumerically("<=", 0.05), "dfq share of the short-kernel guest: %.3f", dfq)

		out := d.CtlOK("top", "--once", "--interval", "200ms")
		rows := framework.TopRows(out)
		for _, gu := range guests {
			Expect(rows).To(HaveKey(gu.name), "accounting sees both VMs:\n%s", out)
		}
	})
})
