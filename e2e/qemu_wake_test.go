package e2e

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// wakes is the mediator's count of signals to VM name's sleeping guests
// (sluice_vm_wakes_total).
func wakes(d *framework.Daemon, name string) uint64 {
	GinkgoHelper()
	for _, vm := range d.Stats().VMs {
		if vm.Name == name {
			return vm.Wakes
		}
	}
	Fail("no stats for VM " + name)
	return 0
}

// depthOneTurnaround runs a depth-1 throttle of 300 µs kernels, each wait
// longer than the agent's 50 µs spin, and returns its p50 turnaround.
func depthOneTurnaround(g *framework.Guest, kernels int) time.Duration {
	GinkgoHelper()
	res := framework.Decode[framework.ThrottleResult](g.Exec("throttle", "--kernel", "300us", "--depth", "1",
		"--kernels", fmt.Sprint(kernels), "--json"))
	Expect(res.Kernels).To(Equal(uint64(kernels)))
	Expect(res.Errors).To(BeZero())
	return time.Duration(res.Turnaround.P50)
}

var _ = Describe("QEMU guests taking completions as interrupts", Label("qemu"), func() {
	BeforeEach(framework.RequiresQEMU)

	It("sleeps until the mediator's MSI-X interrupt with a virtual IOMMU, and polls without one", func() {
		d := framework.StartDaemon(framework.DaemonOptions{})
		const kernels = 300

		By("a guest with a virtual IOMMU: its agent opens the device through vfio-pci and sleeps on the vector")
		irq := d.StartGuest("irq", "--iommu")
		AddReportEntry("boot --iommu", fmt.Sprintf("%s guest with intel-iommu: vm start to agent answering %.2f s", irq.Accel, irq.BootSeconds))
		p50 := depthOneTurnaround(irq, kernels)
		// Each wait passes the spin, so the agent sleeps for most kernels and
		// the mediator signals; a signal that never arrived would cost the
		// SDK's 10 ms recheck, far above this bound.
		Expect(wakes(d, "irq")).To(BeNumerically(">=", kernels/2), "the mediator signalled the sleeping agent")
		Expect(p50).To(BeNumerically("<", 5*time.Millisecond), "woken by the interrupt, not by the 10 ms recheck")
		lat := framework.Decode[framework.LatencyResult](irq.Exec("run", "latency", "--count", "2000", "--json"))
		Expect(lat.Count).To(Equal(2000))
		AddReportEntry("interrupts", fmt.Sprintf("depth-1 300us throttle p50 %v, %d wakes; NOP p50 %v p99 %v",
			p50, wakes(d, "irq"), time.Duration(lat.RoundTrip.P50), time.Duration(lat.RoundTrip.P99)))
		Expect(readLog(irq.SerialLog)).NotTo(ContainSubstring("polling for completions"))

		By("a guest without an IOMMU: vfio-pci cannot take the device, the agent says so once and polls")
		poll := d.StartGuest("poll")
		depthOneTurnaround(poll, kernels)
		AddReportEntry("polling", fmt.Sprintf("depth-1 300us throttle p50 %v", depthOneTurnaround(poll, kernels)))
		Expect(wakes(d, "poll")).To(BeZero(), "a polling guest leaves its wake words clear")
		Expect(strings.Count(readLog(poll.SerialLog), "sluice-agent: polling for completions")).To(Equal(1))
	})
})

func readLog(path string) string {
	GinkgoHelper()
	b, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}
