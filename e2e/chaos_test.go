package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Billing through crashes: two process guests keep throttle kernels on the
// simulated GPU while sluiced is killed (-9) 20 times at random moments and
// restarted each time. sluiced commits every VM's usage to its journal each
// journalInterval, so each crash may lose what completed since the last
// commit, and nothing else.
//
// The ground truth is the commands each VM's backend completed. The guests
// count the completions they observe (every one of them the daemon counted
// first: a channel counts a completion before it publishes it) and the sim
// bills a THROTTLE exactly its length, so a bill is whole kernels of
// chaosKernel. What the guests cannot observe: at a crash, the completion of
// their one kernel in flight (depth 1) may be published and not seen before
// they notice the crash (the endpoint's connection closes) and exit. So after k crashes each VM's bill lies between what its
// guests observed minus what the crashes lost, and what they observed plus
// k kernels.
var _ = Describe("billing through crashes of sluiced", Label("process"), func() {
	BeforeEach(framework.RequiresLinux)

	It("bills each VM the GPU time its completed commands ran, within the journal's interval per kill -9", func() {
		const (
			kills       = 20
			chaosKernel = 500 * time.Microsecond
			// journalInterval is sluiced's default (daemon.DefaultJournalInterval).
			journalInterval = 5 * time.Millisecond
			// perCrash bounds the GPU time one crash may lose, seen from
			// the guests: a commit interval, a kernel that completes
			// across its end, and one completion a stopped guest may have
			// missed at the crash before.
			perCrash = journalInterval + 2*chaosKernel
		)
		seed := GinkgoRandomSeed()
		rng := rand.New(rand.NewPCG(uint64(seed), 15))
		opts := framework.DaemonOptions{ExtraArgs: []string{"--proxy", "off"}}
		d := framework.StartDaemon(opts)
		opts.Dir = d.Dir
		names := []string{"a", "b"}
		endpoints := map[string]string{}
		for _, n := range names {
			endpoints[n] = d.CreateVM(framework.NewVM(n, framework.WithChannels(1))).Endpoint
		}
		throttle := []string{"run", "throttle", "--kernel", chaosKernel.String(), "--depth", "1", "--json"}

		observed := map[string]uint64{} // kernels the guests saw complete
		lost := map[string]int64{}      // observed minus billed, in kernels
		var worst time.Duration         // the most one crash lost of a VM
		var run time.Duration           // the guests' time under load
		for k := 1; k <= kills; k++ {
			guests := map[string]*framework.Proc{}
			for _, n := range names {
				guests[n] = d.StartAgent(endpoints[n], append(throttle, "--duration", "1m")...)
			}
			// The load starts once both guests joined: a loaded machine
			// may take a while to start them.
			for _, n := range names {
				Eventually(func() int { return d.GetVM(n).Peers }).WithTimeout(framework.ConvergeTimeout).
					WithPolling(10*time.Millisecond).Should(Equal(1), "the guest of %s joins", n)
			}
			load := 200*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second))) // where the crash falls
			time.Sleep(load)
			run += load
			d.Kill()
			for _, n := range names {
				// A guest waiting for its kernel in flight notices that
				// the endpoint's connection closed, and exits printing
				// what it observed.
				r := guests[n].Wait()
				Expect(r.Stderr).To(ContainSubstring("the mediator went away"), "the guest of %s\n%s", n, r)
				var res framework.ThrottleResult
				Expect(json.Unmarshal([]byte(r.Stdout), &res)).To(Succeed(), "the guest of %s reports what it observed\n%s", n, r)
				Expect(res.Errors).To(BeZero(), "guest of %s", n)
				Expect(res.Kernels).NotTo(BeZero(), "guest of %s ran nothing in %v", n, load)
				observed[n] += res.Kernels
			}
			d = framework.StartDaemon(opts)
			for _, n := range names {
				u := d.Usage(n)
				Expect(u.Errors).To(BeZero())
				Expect(u.Commands).To(Equal(u.Kernels), "%s: the guests submit kernels only", n)
				Expect(u.GPUNs).To(Equal(u.Kernels*uint64(chaosKernel)), "%s: a bill is whole kernels", n)
				Expect(u.Kernels).To(BeNumerically("<=", observed[n]+uint64(k)),
					"%s after %d crashes: billed more than its guests observed and could have missed", n, k)
				now := int64(observed[n]) - int64(u.Kernels)
				crash := time.Duration(now-lost[n]) * chaosKernel
				Expect(crash).To(BeNumerically("<=", perCrash), "%s: crash %d (after %v of load) lost %v", n, k, load, crash)
				worst = max(worst, crash)
				lost[n] = now
			}
		}

		By("after the last restart the guests run to their end: billed exactly, and a clean stop keeps it")
		billed := map[string]uint64{}
		guests := map[string]*framework.Proc{}
		for _, n := range names {
			billed[n] = d.Usage(n).Kernels
			guests[n] = d.StartAgent(endpoints[n], append(throttle, "--duration", "500ms")...)
		}
		for _, n := range names {
			res := framework.Decode[framework.ThrottleResult](guests[n].Wait())
			Expect(res.Errors).To(BeZero())
			observed[n] += res.Kernels
			billed[n] += res.Kernels
			Expect(d.Usage(n).Kernels).To(Equal(billed[n]), "%s: the live bill", n)
		}
		d.Stop()
		d = framework.StartDaemon(opts)
		for _, n := range names {
			u := d.Usage(n)
			Expect(u.Kernels).To(Equal(billed[n]), "%s after a clean stop", n)
			AddReportEntry("billing through "+fmt.Sprint(kills)+" crashes, vm "+n, fmt.Sprintf(
				"observed %d kernels of %v, billed %d: %v lost in all (bound %v), the worst crash of either VM %v; seed %d, %v under load",
				observed[n], chaosKernel, u.Kernels, time.Duration(lost[n])*chaosKernel, kills*journalInterval, worst, seed, run))
			Expect(time.Duration(lost[n])*chaosKernel).To(BeNumerically("<=", kills*journalInterval), "%s: all crashes lost", n)
		}
	})
})
