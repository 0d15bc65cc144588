package e2e

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// A guest's agent has no reconnect logic, and without a mediator nothing
// completes what it waits for: it must give up, with an error that says
// why, instead of waiting forever. A hand-over keeps its connection and
// must not make it give up.
var _ = Describe("a process guest whose sluiced goes away", Label("process"), func() {
	// goneBound is how soon after the kill the agent must have exited: it
	// notices the connection's EOF at once; this is far beyond that on a
	// loaded machine and far below the run's own end (a minute).
	const goneBound = 10 * time.Second

	It("exits with 'the mediator went away' when sluiced is killed, and stays through a hand-over", func() {
		framework.RequiresLinux()
		d := framework.StartDaemon(framework.DaemonOptions{Clock: framework.ClockWall})
		ep := d.CreateVM(framework.NewVM("gone", framework.WithChannels(1))).Endpoint
		// Long kernels one at a time: the agent spends its time asleep,
		// waiting for a completion.
		guest := d.StartAgent(ep, "run", "throttle", "--kernel", "200ms", "--depth", "1", "--duration", "1m", "--json")
		Eventually(func() uint64 { return d.Usage("gone").Kernels }).WithTimeout(framework.DefaultTimeout).
			Should(BeNumerically(">", 0), "the guest runs kernels")

		d.HandOver()
		before := d.Usage("gone").Kernels
		Eventually(func() uint64 { return d.Usage("gone").Kernels }).WithTimeout(framework.DefaultTimeout).
			Should(BeNumerically(">", before), "the guest runs kernels in the successor")
		if guest.Exited() {
			Fail(fmt.Sprintf("a hand-over keeps the guest's connection, and its agent goes on; it exited:\n%s", guest.Wait()))
		}

		time.Sleep(100 * time.Millisecond) // into a kernel
		d.Kill()
		killed := time.Now()
		r := guest.WaitTimeout(goneBound)
		took := time.Since(killed)
		Expect(r.ExitCode).To(Equal(1), "%s", r)
		Expect(r.Stderr).To(ContainSubstring("sluice-agent: the mediator went away: ivshmem: server closed the connection"), "%s", r)
		var res framework.ThrottleResult
		Expect(json.Unmarshal([]byte(r.Stdout), &res)).To(Succeed(), "the agent prints what it ran\n%s", r)
		Expect(res.Kernels).To(BeNumerically(">", 0))
		Expect(res.Errors).To(BeZero(), "no kernel failed: the run was cut short")
		AddReportEntry("agent exit after kill -9", fmt.Sprintf("%v (%d kernels of 200ms ran)", took, res.Kernels))
	})

	// A QEMU guest has no connection of its own to the endpoint (QEMU
	// holds it): its agent notices that sluiced's heartbeat stood still.
	It("in a QEMU guest, exits when sluiced's heartbeat stops", Label("qemu"), func() {
		framework.RequiresQEMU()
		const stall = 2 * time.Second
		d := framework.StartDaemon(framework.DaemonOptions{Clock: framework.ClockWall})
		g := d.StartGuest("gone")
		inVM := g.StartExec("--mediator-timeout", stall.String(),
			"run", "throttle", "--kernel", "200ms", "--depth", "1", "--duration", "1m", "--json")
		Eventually(func() uint64 { return d.Usage("gone").Kernels }).WithTimeout(framework.DefaultTimeout).
			Should(BeNumerically(">", 1), "the guest runs kernels")
		// The agent judges a heartbeat only once it has seen it move, and
		// sluiced moves it once a second: two beats, so that it has (its
		// kernels alone can take less than a second; then it never judged,
		// and waited for the run's end).
		time.Sleep(2500 * time.Millisecond)
		d.Kill()
		killed := time.Now()
		r := inVM.WaitTimeout(goneBound + stall)
		took := time.Since(killed)
		Expect(r.ExitCode).To(Equal(1), "%s", r)
		Expect(r.Stderr).To(MatchRegexp(`sluice-agent: the mediator went away: its heartbeat stood still for \d`), "%s", r)
		var res framework.ThrottleResult
		Expect(json.Unmarshal([]byte(r.Stdout), &res)).To(Succeed(), "the agent prints what it ran\n%s", r)
		Expect(res.Errors).To(BeZero())
		AddReportEntry("agent exit after kill -9, device mode", fmt.Sprintf("%v with --mediator-timeout %v (%d kernels of 200ms ran)", took, stall, res.Kernels))
	})
})
