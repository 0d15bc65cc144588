package e2e

import (
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The fleet's durability, on each store: a controller and two sluiced hosts
// with process guests, four VMs placed, a weight change that moves shares,
// every daemon killed (-9) and restarted mid-run, and at the end the
// controller's usage equals the hosts' ledgers and the guests' own counts
// exactly: nothing lost, nothing counted twice.
//
// Where the kills fall: the controller dies while the hosts push (their
// intervals in flight are sent again and must count once), and again while
// the guests run, so that the hosts' usage waits for it. A host dies once
// its guests' last completions are in its usage journal (committed every
// 5ms; what a killed sluiced had not committed is lost to the host as well,
// and to the guests' count it could not be compared; the chaos spec bounds
// that loss): one right after its guests ran, one holding usage the dead
// controller could not take.
// journalSettle is twenty of sluiced's 5ms journal commits: a guest's last
// completions are on disk that long after it exits.
const journalSettle = 100 * time.Millisecond

var _ = Describe("a fleet's usage through crashes", Label("process"), func() {
	BeforeEach(framework.RequiresLinux)

	DescribeTable("bills exactly what the guests ran, through kill -9 of each daemon",
		func(store string) {
			var ctl *framework.Controller
			if store == "postgres" {
				ctl = framework.StartControllerOn(framework.StartPostgres())
			} else {
				ctl = framework.StartController()
			}
			join := func(host string) []string {
				return []string{"--controller", ctl.URL, "--controller-token", ctl.Token(host+"-sluiced", "host", host),
					"--controller-host", host, "--controller-gpus", "sim:4GiB", "--controller-interval", "200ms"}
			}
			joins := map[string][]string{"gpu1": join("gpu1"), "gpu2": join("gpu2")}
			hosts := map[string]*framework.Daemon{}
			for h, args := range joins {
				hosts[h] = framework.StartDaemon(framework.DaemonOptions{ExtraArgs: args})
			}
			restart := func(h string) {
				hosts[h] = framework.StartDaemon(framework.DaemonOptions{Dir: hosts[h].Dir, ExtraArgs: joins[h]})
			}
			tenant := ctl.Token("acme", "tenant", "acme")

			By("four VMs are placed, two on each host, and the hosts create them")
			placed := map[string][]string{} // host -> its VMs, in creation order
			on := map[string]string{}       // VM -> host
			for _, name := range []string{"a", "b", "c", "d"} {
				var vm controllerapi.VM
				ctl.CtlJSON(&vm, tenant, "vm", "create", name, "--tenant", "acme")
				placed[vm.Host] = append(placed[vm.Host], name)
				on[name] = vm.Host
			}
			Expect(placed).To(HaveLen(2))
			Expect(placed["gpu1"]).To(HaveLen(2))
			Expect(placed["gpu2"]).To(HaveLen(2))
			for name, h := range on {
				Eventually(func() int { return hosts[h].Ctl("vm", "get", name).ExitCode }).
					WithTimeout(framework.ConvergeTimeout).Should(BeZero(), "VM %s on %s", name, h)
			}

			// kernels is the ground truth: what each VM's guest ran.
			kernels := map[string]uint64{}
			// run runs a throttle guest on every VM at once for d, calls
			// during (if not nil) while they run, and adds what each
			// completed to kernels.
			run := func(d time.Duration, during func()) {
				procs := map[string]*framework.Proc{}
				for name, h := range on {
					ep := hosts[h].GetVM(name).Endpoint
					procs[name] = hosts[h].StartAgent(ep, "run", "throttle", "--kernel", "2ms", "--depth", "8",
						"--duration", d.String(), "--json")
				}
				if during != nil {
					during()
				}
				for name, p := range procs {
					r := framework.Decode[framework.ThrottleResult](p.Wait())
					Expect(r.Errors).To(BeZero(), "guest of %s", name)
					Expect(r.Kernels).NotTo(BeZero(), "guest of %s", name)
					kernels[name] += r.Kernels
				}
			}
			// ratio measures, from gpu1's ledger, the GPU time of p over
			// q's in the middle 2 s of a 3 s run, when both surely run. (A
			// 1 s window measured 0.58 to 1.61 at 1:1 on 2 loaded cores:
			// the guests, two daemons and the controller share them, and a
			// guest short of CPU leaves its queue empty for a while.)
			p, q := placed["gpu1"][0], placed["gpu1"][1]
			ratio := func() float64 {
				time.Sleep(500 * time.Millisecond)
				p0, q0 := hosts["gpu1"].Usage(p).GPUNs, hosts["gpu1"].Usage(q).GPUNs
				time.Sleep(2 * time.Second)
				p1, q1 := hosts["gpu1"].Usage(p).GPUNs, hosts["gpu1"].Usage(q).GPUNs
				Expect(q1).To(BeNumerically(">", q0), "%s ran nothing", q)
				return float64(p1-p0) / float64(q1-q0)
			}

			By("equal weights share gpu1 about equally")
			var before float64
			run(3*time.Second, func() { before = ratio() })
			Expect(before).To(BeNumerically("~", 1, 0.5), "GPU time %s:%s at weights 1:1", p, q)

			By("weight 9 for one VM at the controller moves gpu1's shares towards it; the controller is killed while the hosts push")
			ctl.CtlOK(tenant, "vm", "set", p, "--weight", "9")
			Eventually(func() uint32 { return hosts["gpu1"].GetVM(p).Weight }).WithTimeout(framework.ConvergeTimeout).Should(Equal(uint32(9)))
			var after float64
			run(3*time.Second, func() {
				killed := make(chan struct{})
				go func() {
					defer GinkgoRecover()
					defer close(killed)
					time.Sleep(700 * time.Millisecond)
					ctl.Kill()
				}()
				after = ratio()
				<-killed
			})
			// Not 9:1: on a loaded machine the guests cannot always keep
			// their queues full, and the scheduler gives an idle VM's
			// share away. About 3:1 and more is what it gets on 2 cores.
			Expect(after).To(BeNumerically(">=", 2), "GPU time %s:%s at weights 9:1 (%.2f at 1:1)", p, q, before)
			Expect(after).To(BeNumerically(">", 1.5*before), "GPU time %s:%s at weights 9:1 (%.2f at 1:1)", p, q, before)
			AddReportEntry("gpu1 shares", fmt.Sprintf("GPU time %s:%s %.2f at weights 1:1, %.2f at 9:1", p, q, before, after))
			ctl.Restart()

			By("gpu1's sluiced is killed right after its guests ran, their work in its journal")
			time.Sleep(journalSettle)
			hosts["gpu1"].Kill()
			restart("gpu1")

			By("the controller is killed, the guests run, and gpu2's sluiced is killed holding usage the controller has not seen")
			ctl.Kill()
			run(time.Second, nil)
			time.Sleep(journalSettle)
			hosts["gpu2"].Kill()
			ctl.Restart()
			restart("gpu2")

			By("the controller bills every VM exactly its host's ledger and its guests' kernels")
			billed := func(name string) controllerapi.UsageReport {
				var rep controllerapi.UsageReport
				ctl.CtlJSON(&rep, tenant, "usage", "--vm", name)
				return rep
			}
			for name, h := range on {
				ledger := hosts[h].Usage(name)
				Expect(ledger.Kernels).To(Equal(kernels[name]), "%s's ledger on %s against its guests' count", name, h)
				Eventually(func() [2]int64 { r := billed(name); return [2]int64{r.TotalGpuNs, r.TotalKernels} }).
					WithTimeout(framework.ConvergeTimeout).Should(Equal([2]int64{int64(ledger.GPUNs), int64(ledger.Kernels)}), "usage of %s", name)
			}
			Consistently(func() [4]int64 {
				var out [4]int64
				for i, name := range []string{"a", "b", "c", "d"} {
					out[i] = billed(name).TotalGpuNs
				}
				return out
			}).WithTimeout(time.Second).WithPolling(250 * time.Millisecond).Should(Equal([4]int64{
				int64(hosts[on["a"]].Usage("a").GPUNs), int64(hosts[on["b"]].Usage("b").GPUNs),
				int64(hosts[on["c"]].Usage("c").GPUNs), int64(hosts[on["d"]].Usage("d").GPUNs)}))
		},
		Entry("on SQLite", "sqlite"),
		Entry("on PostgreSQL", "postgres"),
	)
})
