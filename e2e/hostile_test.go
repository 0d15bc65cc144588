package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The hostile-guest specs run a normal VM (short kernels at a modest depth)
// beside a hostile one with equal weights, on the simulated GPU's wall
// clock under the default policy (the deep-queue spec with sluiced
// --arbitration turns), and hold the normal VM to two promises:
// at least 45% of the GPU time accounting charged in the run, and a p99
// turnaround within two scheduling periods (the quantum: the mean period
// the daemon reports over the run) of its own kernel's length.
const (
	normalKernel = time.Millisecond
	normalDepth  = 4
	normalRun    = 3 * time.Second
	// hostileRun outlasts the normal VM's run, which starts after the
	// hostile VM is busy; the hostile agents are stopped after it.
	hostileRun = normalRun + 5*time.Second
)

// fairness is what the normal VM got while the hostile one ran.
type fairness struct {
	normal       framework.ThrottleResult
	share        float64       // the normal VM's part of the GPU time accounting charged
	trueShare    float64       // ... of the GPU busy time, from completion timestamps
	period       time.Duration // the mean scheduling period
	hostileHeld  float64       // the part of the run the scheduler held the hostile VM
	hostileStats hostapi.VMStats
}

func (f fairness) String() string {
	return fmt.Sprintf("normal VM: %d kernels of %v, accounted share %.1f%% (true %.1f%%), turnaround p50 %v p99 %v max %v; "+
		"mean period %v; hostile VM: held %.1f%% of the run, budget %v, in flight %v, estimate %v, %d stalls, %d timeouts, %d errors",
		f.normal.Kernels, normalKernel, 100*f.share, 100*f.trueShare, time.Duration(f.normal.Turnaround.P50),
		time.Duration(f.normal.Turnaround.P99), time.Duration(f.normal.Turnaround.Max), f.period, 100*f.hostileHeld,
		time.Duration(f.hostileStats.InflightBudgetNs), time.Duration(f.hostileStats.InflightNs),
		time.Duration(f.hostileStats.EstimateNs), f.hostileStats.BudgetStalls, f.hostileStats.Timeouts, f.hostileStats.Usage.Errors)
}

// vmStats finds a VM in a stats snapshot.
func vmStats(st hostapi.Stats, name string) hostapi.VMStats {
	GinkgoHelper()
	for _, v := range st.VMs {
		if v.Name == name {
			return v
		}
	}
	Fail(fmt.Sprintf("no VM %q in the stats", name))
	return hostapi.VMStats{}
}

// besideHostile waits until the VM "hostile" uses the GPU, runs the normal
// VM's throttle workload on normal for normalRun, and measures what it got.
func besideHostile(d *framework.Daemon, normal hostapi.VM) fairness {
	GinkgoHelper()
	return besideHostileFor(d, normal, normalRun)
}

// besideHostileFor is besideHostile with a run of the normal VM's own
// length.
func besideHostileFor(d *framework.Daemon, normal hostapi.VM, run time.Duration) fairness {
	GinkgoHelper()
	Eventually(func() uint64 { return vmStats(d.Stats(), "hostile").Usage.GPUNs }).
		WithTimeout(30*time.Second).WithPolling(20*time.Millisecond).ShouldNot(BeZero(), "the hostile VM should be running")
	// Accounting charges a period's completions when the period ends: wait
	// for one to end after the hostile VM's first completion, so that the
	// charged time and the billed time start from the same completions (a
	// 500 ms command completing just before the first snapshot was charged
	// inside the run and billed before it).
	p0 := d.Stats().Periods
	Eventually(func() int64 { return d.Stats().Periods }).
		WithTimeout(10*time.Second).WithPolling(5*time.Millisecond).Should(BeNumerically(">", p0), "a scheduling period should end")
	before := d.Stats()
	r := d.Agent(normal.Endpoint, "run", "throttle", "--kernel", normalKernel.String(),
		"--depth", strconv.Itoa(normalDepth), "--duration", run.String(), "--json")
	after := d.Stats()
	f := fairness{normal: framework.Decode[framework.ThrottleResult](r), hostileStats: vmStats(after, "hostile")}
	nb, na := vmStats(before, normal.Name), vmStats(after, normal.Name)
	hb, ha := vmStats(before, "hostile"), f.hostileStats
	acctN, acctH := na.AccountedNs-nb.AccountedNs, ha.AccountedNs-hb.AccountedNs
	busyN, busyH := na.Usage.GPUNs-nb.Usage.GPUNs, ha.Usage.GPUNs-hb.Usage.GPUNs
	Expect(acctN+acctH).To(BeNumerically(">", 0), "accounting charged nothing in the run")
	f.share = float64(acctN) / float64(acctN+acctH)
	f.trueShare = float64(busyN) / float64(busyN+busyH)
	periods := after.Periods - before.Periods
	Expect(periods).To(BeNumerically(">", 0), "no scheduling period ended in the run")
	f.period = time.Duration((after.Now - before.Now) / periods)
	f.hostileHeld = float64(ha.HeldNs-hb.HeldNs) / float64(after.Now-before.Now)
	AddReportEntry("fairness", f.String())
	return f
}

// expectFair holds the normal VM to its share and its turnaround.
func expectFair(f fairness) {
	GinkgoHelper()
	Expect(f.normal.Errors).To(BeZero(), "the normal VM's kernels should all succeed")
	Expect(f.normal.Kernels).To(BeNumerically(">", 0))
	Expect(f.share).To(BeNumerically(">=", 0.45), "the normal VM's accounted share of the GPU: %s", f)
	Expect(time.Duration(f.normal.Turnaround.P99)).To(BeNumerically("<=", normalKernel+2*f.period),
		"the normal VM's p99 turnaround should be within two periods of its kernel: %s", f)
}

// startHostile starts sluice-agent with args on each of the hostile VM's
// channels (args get --channel N and the arguments perChannel gives).
func startHostile(d *framework.Daemon, vm hostapi.VM, perChannel func(ch int) []string, args ...string) []*framework.Proc {
	GinkgoHelper()
	var procs []*framework.Proc
	for ch := range vm.Channels {
		a := append(append([]string{}, args...), "--channel", strconv.Itoa(ch))
		if perChannel != nil {
			a = append(a, perChannel(ch)...)
		}
		procs = append(procs, d.StartAgent(vm.Endpoint, a...))
	}
	return procs
}

// stopAll interrupts the agents and returns how they ended.
func stopAll(procs []*framework.Proc) []framework.Result {
	GinkgoHelper()
	for _, p := range procs {
		p.Signal(syscall.SIGTERM)
	}
	var rs []framework.Result
	for _, p := range procs {
		rs = append(rs, p.Wait())
	}
	return rs
}

var _ = Describe("Hostile guests", Label("process", "hostile"), func() {
	BeforeEach(framework.RequiresLinux)

	var d *framework.Daemon
	var normal, hostile hostapi.VM
	// setupWith starts the daemon with args, then the two VMs.
	setupWith := func(args []string, extra ...framework.VMOption) {
		d = framework.StartDaemon(framework.DaemonOptions{Clock: framework.ClockWall, ExtraArgs: args})
		normal = d.CreateVM(framework.NewVM("normal", framework.WithChannels(1)))
		hostile = d.CreateVM(framework.NewVM("hostile", append([]framework.VMOption{framework.WithRingEntries(256)}, extra...)...))
		Expect(normal.Weight).To(Equal(hostile.Weight), "equal weights")
		Expect(d.CtlOK("policy", "get")).To(ContainSubstring("dfq"), "the default policy")
	}
	setup := func(extra ...framework.VMOption) { setupWith(nil, extra...) }
	// turns: one VM at a time has work on the GPU (sluiced --arbitration).
	turns := []string{"--arbitration", "turns"}

	// With turns (sluiced --arbitration turns): one VM at a time has work
	// on the GPU, so a hostile VM's queued kernels no longer run beside the
	// normal VM's, and the scheduler is charged exact busy time. Measured
	// (sim, wall clock): accounted share 48.5% (true 48.9%), p99 28 ms
	// against a bound of 81 ms. Under the driver arbitration it measured
	// 30-44%: the spec stays on turns (not the default, auto, which could
	// leave them).
	It("keeps the GPU fair against deep queues of long kernels on every channel", func() {
		setupWith(turns)
		procs := startHostile(d, hostile, nil, "run", "throttle", "--kernel", "10ms", "--depth", "256",
			"--duration", hostileRun.String(), "--json")
		f := besideHostile(d, normal)
		stopAll(procs)
		Expect(f.hostileStats.InflightBudgetNs).To(BeNumerically(">", 0), "the hostile VM has an in-flight budget")
		Expect(f.hostileStats.BudgetStalls).To(BeNumerically(">", 0), "its deep queues stopped for room")
		expectFair(f)
	})

	// Kernels as long as the VM may run (the default longest command, 500
	// ms): no scheduler that only picks whose commands go next can bound
	// the normal VM's wait below one of them. The GPU can: a real one
	// time-slices between contexts (compute preemption), and the sim
	// models it with timeslice (2 ms here). Under turns a holder whose
	// command runs three quanta past its turn's end loses the turn beside
	// it (gate.OverrunQuanta), and the normal VM's commands run within a
	// time slice (before that: accounted 40.3%, p99 503 ms; under the
	// driver arbitration on a GPU that does not preempt 17.5-26.9% and
	// 504-517 ms). The normal VM runs 10 s here: accounting charges each
	// of the hostile VM's commands, half a second of GPU time, when it
	// completes, and over 3 s one more or one fewer of them in the run
	// moves the normal VM's charged share by 8 points (45.6-62.9% in four
	// runs of 3 s).
	It("keeps the GPU fair against kernels as long as the VM may run, and refuses longer ones", func() {
		setupWith(append(turns, "--backend-params", "timeslice=2ms"))
		limit := time.Duration(hostile.MaxCommandNs)
		Expect(limit).To(BeNumerically(">", 0))
		r := d.Agent(hostile.Endpoint, "run", "throttle", "--kernel", (10 * limit).String(),
			"--kernels", "1", "--json")
		Expect(r.ExitCode).NotTo(BeZero(), "a THROTTLE ten times the longest command: %s", r)
		Expect(r.Stderr).To(ContainSubstring("too long"))
		const run = 10 * time.Second
		procs := startHostile(d, hostile, nil, "run", "throttle", "--kernel", limit.String(),
			"--depth", "4", "--duration", (run + hostileRun - normalRun).String(), "--json")
		f := besideHostileFor(d, normal, run)
		stopAll(procs)
		expectFair(f)
		Expect(d.Stats().TurnOverruns).To(BeNumerically(">", 0), "turns passed beside the hostile VM's commands")
	})

	It("refuses a memory hog's ALLOCs past its quota with no memory, and the other VM does not notice", func() {
		setup(framework.WithMemory("256MiB"))
		procs := startHostile(d, hostile, func(ch int) []string { return []string{"--first-handle", strconv.Itoa(1 + 100*ch)} },
			"run", "memset", "--buffer-mib", "64", "--buffers", "16", "--depth", "8", "--duration", hostileRun.String(), "--json")
		f := besideHostile(d, normal)
		buffers := 0
		for _, r := range stopAll(procs) {
			var res framework.MemsetResult
			Expect(json.Unmarshal([]byte(r.Stdout), &res)).To(Succeed(), "the hog's result: %s", r)
			Expect(res.AllocError).To(Equal("no memory"), "every hog channel has an ALLOC refused: %s", r)
			buffers += res.Buffers
		}
		Expect(buffers).To(Equal(4), "four buffers of 64 MiB fill the 256 MiB quota")
		Expect(f.hostileStats.MemoryUsed).To(Equal(uint64(256<<20)), "the hog held its whole quota and no more")
		Expect(f.hostileStats.Usage.Errors).To(BeNumerically(">=", hostile.Channels), "every channel had an ALLOC refused")
		expectFair(f)
	})

	It("keeps the GPU fair against MEMSET loops of large buffers", func() {
		setup()
		procs := startHostile(d, hostile, func(ch int) []string { return []string{"--first-handle", strconv.Itoa(1 + ch)} },
			"run", "memset", "--buffer-mib", "256", "--buffers", "1", "--depth", "64", "--duration", hostileRun.String(), "--json")
		f := besideHostile(d, normal)
		stopAll(procs)
		Expect(f.hostileStats.EstimateNs).To(BeNumerically(">", 0), "the hostile VM's MEMSETs were measured")
		expectFair(f)
	})
})
