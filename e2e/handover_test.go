package e2e

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/e2e/framework"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/transport/process"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Restarting sluiced without disturbing VMs: on SIGHUP sluiced hands its
// VMs' regions, doorbell servers and guest connections to a successor (its
// binary re-executed) that resumes them. The guests' agents have no
// reconnect logic: a disconnect would fail their throttle run, so a run
// that ends without an error saw no disconnect, only pauses. Each bill
// must match the kernels the guest completed exactly: the hand-over
// neither loses a completion nor runs one twice.
var _ = Describe("restarting sluiced without disturbing VMs", func() {
	const (
		handovers = 3
		kernel    = 500 * time.Microsecond
	)
	// The VMs serve system calls through their proxies, which a hand-over
	// or a crash restarts.
	opts := framework.DaemonOptions{}
	throttle := []string{"--kernel", kernel.String(), "--depth", "4", "--json"}

	// handOver hands the daemon over handovers times, a second apart,
	// while the guests run, and checks that every VM keeps its guest.
	handOver := func(d *framework.Daemon, vms ...string) {
		GinkgoHelper()
		pid := d.Pid()
		for i := 1; i <= handovers; i++ {
			time.Sleep(time.Second)
			took := d.HandOver()
			Expect(d.Pid()).To(Equal(pid), "the successor is the same process, re-executed")
			for _, name := range vms {
				Expect(d.GetVM(name).Peers).To(Equal(1), "vm %s keeps its guest through hand-over %d", name, i)
			}
			AddReportEntry(fmt.Sprintf("hand-over %d", i), fmt.Sprintf("SIGHUP to the successor answering: %v", took))
		}
	}
	checkBill := func(d *framework.Daemon, name string, before hostapi.Usage, res framework.ThrottleResult) {
		GinkgoHelper()
		Expect(res.Errors).To(BeZero(), "vm %s's guest saw an error", name)
		Expect(res.Kernels).To(BeNumerically(">", 0))
		u := d.Usage(name)
		Expect(u.Errors).To(Equal(before.Errors))
		Expect(u.Kernels-before.Kernels).To(Equal(res.Kernels), "vm %s is billed each kernel its guest completed once", name)
		Expect(u.GPUNs-before.GPUNs).To(Equal(res.Kernels*uint64(kernel)), "vm %s: the sim bills a kernel its length", name)
		AddReportEntry("pause seen by "+name, fmt.Sprintf("%d kernels of %v through %d hand-overs; turnaround p50 %v, max %v",
			res.Kernels, kernel, handovers, time.Duration(res.Turnaround.P50), time.Duration(res.Turnaround.Max)))
	}

	It("keeps a process guest running throttle through three SIGHUPs, billed exactly", Label("process"), func() {
		framework.RequiresLinux()
		d := framework.StartDaemon(opts)
		ep := d.CreateVM(framework.NewVM("proc", framework.WithChannels(1))).Endpoint
		guest := d.StartAgent(ep, append([]string{"run", "throttle", "--duration", "5s"}, throttle...)...)
		buf := newBufferGuest(d.CreateVM(framework.NewVM("buf", framework.WithChannels(1))).Endpoint)
		handOver(d, "proc", "buf")
		checkBill(d, "proc", hostapi.Usage{}, framework.Decode[framework.ThrottleResult](guest.Wait()))

		By("a buffer allocated and filled before the hand-overs reads back the same after them")
		buf.check()

		By("the successor's syscall proxy serves the VM's GPU system calls")
		files := wordTexts(GinkgoRandomSeed())
		framework.WriteHostVolumeFiles(d.GetVM("proc").Volume, files)
		checkSyscalls(d, "proc", files, func(args ...string) framework.Result { return d.Agent(ep, args...) })
		d.Stop() // a clean stop after the hand-overs: exit 0, no socket left
	})

	It("keeps a process guest running throttle, and a buffer's contents, through two kill -9s and a restart with its descriptors in systemd's fd store", Label("process"), func() {
		framework.RequiresLinux()
		const (
			// perCrash bounds what one crash may lose of a bill: the
			// journal's interval (sluiced's default 5ms) and two kernels
			// completing across it, as in "billing through crashes".
			journalInterval = 5 * time.Millisecond
			perCrash        = journalInterval + 2*kernel
		)
		store := framework.NewFDStore()
		crashOpts := opts
		crashOpts.FDStore = store
		d := framework.StartDaemon(crashOpts)
		crashOpts.Dir = d.Dir
		ep := d.CreateVM(framework.NewVM("proc", framework.WithChannels(1))).Endpoint
		guest := d.StartAgent(ep, append([]string{"run", "throttle", "--duration", "6s"}, throttle...)...)
		buf := newBufferGuest(d.CreateVM(framework.NewVM("buf", framework.WithChannels(1))).Endpoint)
		Expect(store.Has("vm/buf/device/sim/0") && store.Has("vm/buf/device/sim/1")).To(BeTrue(), "the sim's device files are stored from the start")
		for i := 1; i <= handovers; i++ {
			Eventually(func() bool { return store.Has("vm/proc/peer/1/conn") }).WithTimeout(framework.ConvergeTimeout).
				Should(BeTrue(), "the guest's connection is stored")
			time.Sleep(time.Second)
			how := "kill -9"
			start := time.Now()
			if i == 2 { // systemctl restart: SIGTERM leaves the VMs to the store
				how = "SIGTERM"
				d.Restart()
			} else {
				d.Kill()
			}
			d = framework.StartDaemon(crashOpts)
			Expect(d.GetVM("proc").Peers).To(Equal(1), "the guest is taken over after %s %d", how, i)
			Expect(d.GetVM("buf").Peers).To(Equal(1), "the buffer's guest is taken over after %s %d", how, i)
			AddReportEntry(fmt.Sprintf("restart %d", i), fmt.Sprintf("%s to the successor answering: %v", how, time.Since(start)))
		}
		res := framework.Decode[framework.ThrottleResult](guest.Wait())
		Expect(res.Errors).To(BeZero(), "the guest saw an error")
		u := d.Usage("proc")
		Expect(u.Errors).To(BeZero())
		Expect(u.Kernels).To(BeNumerically("<=", res.Kernels), "no kernel is billed twice")
		lost := time.Duration(res.Kernels-u.Kernels) * kernel
		Expect(lost).To(BeNumerically("<=", 2*perCrash), "each crash lost at most a journal interval, the restart nothing")
		AddReportEntry("restarts", fmt.Sprintf("%d kernels of %v through 2 kill -9s and a SIGTERM, %d billed (%v lost); turnaround p50 %v, max %v",
			res.Kernels, kernel, u.Kernels, lost, time.Duration(res.Turnaround.P50), time.Duration(res.Turnaround.Max)))

		By("a buffer allocated and filled before the kill -9s reads back the same after them")
		buf.check()

		By("the VM's GPU system calls are served through the last successor's proxy")
		files := wordTexts(GinkgoRandomSeed())
		framework.WriteHostVolumeFiles(d.GetVM("proc").Volume, files)
		checkSyscalls(d, "proc", files, func(args ...string) framework.Result { return d.Agent(ep, args...) })
		d.Kill() // as systemctl stop, which then empties the store
	})

	It("keeps a QEMU guest and a process guest running throttle through three SIGHUPs, billed exactly", Label("qemu", "process"), func() {
		framework.RequiresQEMU()
		d := framework.StartDaemon(opts)
		g := d.StartGuest("qemu")
		ep := d.CreateVM(framework.NewVM("proc", framework.WithChannels(1))).Endpoint
		before := d.Usage("qemu")
		inVM := g.StartExec(append([]string{"throttle", "--duration", "8s"}, throttle...)...)
		proc := d.StartAgent(ep, append([]string{"run", "throttle", "--duration", "6s"}, throttle...)...)
		handOver(d, "qemu", "proc")
		checkBill(d, "proc", hostapi.Usage{}, framework.Decode[framework.ThrottleResult](proc.Wait()))
		checkBill(d, "qemu", before, framework.Decode[framework.ThrottleResult](inVM.Wait()))
	})
})

// bufferGuest is a process guest (this test process, through the SDK)
// that allocated a device buffer and filled it with a pattern.
type bufferGuest struct {
	dev  *sdk.Device
	ch   *sdk.Channel
	data []byte
}

const bufHandle = 9

// newBufferGuest joins the VM at endpoint, allocates a buffer of 200 KiB
// (whole pages and a part of one) and fills it from the heap.
func newBufferGuest(endpoint string) *bufferGuest {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := process.Dial(ctx, endpoint, 0)
	Expect(err).NotTo(HaveOccurred())
	dev, err := sdk.Open(tr)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(dev.Close)
	ch, err := dev.Channel(0)
	Expect(err).NotTo(HaveOccurred())
	g := &bufferGuest{dev: dev, ch: ch, data: make([]byte, 200<<10)}
	for i := range g.data {
		g.data[i] = byte(i*131 + i>>9)
	}
	Expect(dev.WriteHeap(0, g.data)).To(Succeed())
	n := uint64(len(g.data))
	g.run(abi.Command{Op: abi.OpAlloc, Handle: bufHandle, Size: n},
		abi.Command{Op: abi.OpCopy, Handle: bufHandle, Dir: abi.CopyHostToDevice, Length: n})
	Expect(dev.WriteHeap(0, make([]byte, n))).To(Succeed()) // only the buffer has it now
	return g
}

func (g *bufferGuest) run(cmds ...abi.Command) {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	idx, err := g.ch.Submit(ctx, cmds...)
	Expect(err).NotTo(HaveOccurred())
	Expect(g.ch.Wait(ctx, idx)).To(Succeed())
}

// check reads the buffer back into the heap and compares it with what
// was written, byte for byte.
func (g *bufferGuest) check() {
	GinkgoHelper()
	n := uint64(len(g.data))
	g.run(abi.Command{Op: abi.OpCopy, Handle: bufHandle, Dir: abi.CopyDeviceToHost, HeapOff: n, Length: n})
	got := make([]byte, n)
	Expect(g.dev.ReadHeap(n, got)).To(Succeed())
	Expect(bytes.Equal(got, g.data)).To(BeTrue(), "the buffer's %d bytes read back the same", n)
}
