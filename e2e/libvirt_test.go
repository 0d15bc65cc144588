package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-gpu/sluice/e2e/framework"
	"golang.org/x/sys/unix"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("libvirt domains", Label("libvirt"), func() {
	BeforeEach(func() {
		framework.RequiresRoot()
		framework.RequiresQEMU()
		framework.RequiresLibvirt()
	})

	It("lets the hook create a domain's VM at start and delete it when the guest powers off", func() {
		const kernel, kernels = 100 * time.Microsecond, 2000
		// Unique on the machine: libvirt's definitions and logs are global.
		name := fmt.Sprintf("sluice-e2e-%d", os.Getpid())

		// libvirt runs QEMU as its own user (libvirt-qemu), which must
		// connect to the endpoint socket: sockets 0666, directories
		// searchable (AllowTraverse below).
		d := framework.StartDaemon(framework.DaemonOptions{ExtraArgs: []string{"--socket-mode", "0666"}})
		lv := framework.StartLibvirt(framework.LibvirtOptions{HookSocket: d.Socket})

		By("generating the domain XML from a VM in sluiced")
		vm := d.CreateVM(framework.NewVM(name, framework.WithWeight(3), framework.WithChannels(2)))
		image := framework.GuestImage()
		framework.AllowTraverse(filepath.Dir(vm.Endpoint))
		framework.AllowTraverse(image)
		cmdline := "console=ttyS0 quiet panic=-1 sluice.agent=--device," +
			strings.Join(framework.ThrottleArgs(kernel, kernels), ",")
		domainXML := d.CtlOK("libvirt", "xml", name, "--domain", "--accel", "tcg", "--image", image,
			"--serial-log", filepath.Join(d.Dir, name+"-serial.log"), "--cmdline", cmdline)
		Expect(domainXML).To(ContainSubstring(vm.Endpoint), "the <shmem> server is the VM's endpoint")
		file := filepath.Join(d.Dir, name+".xml")
		Expect(os.WriteFile(file, []byte(domainXML), 0o600)).To(Succeed())
		r := framework.Run("virt-xml-validate", file, "domain")
		Expect(r.ExitCode).To(Equal(0), "libvirt's schema should accept the domain\n%s", r)

		By("deleting the VM, so that only the hook can create it again")
		d.CtlOK("vm", "delete", name)
		r = d.Ctl("vm", "get", name)
		Expect(r.ExitCode).To(Equal(1), "%s", r)

		By("defining and starting the domain")
		dom := lv.Define(file)
		Expect(dom.Name).To(Equal(name))
		dom.Start()
		got := d.GetVM(name)
		Expect(got.Endpoint).To(Equal(vm.Endpoint))
		Expect(got.Weight).To(Equal(uint32(3)), "the hook creates the VM with the settings of the domain's <sluice:vm> metadata")
		Expect(got.Channels).To(Equal(2), "the hook creates the VM with the settings of the domain's <sluice:vm> metadata")
		// QEMU connects before virsh start returns; it joins once the
		// endpoint sees it has read its whole handshake.
		Eventually(func() int { return d.GetVM(name).Peers }).WithTimeout(framework.ConvergeTimeout).
			Should(BeNumerically(">=", 1), "QEMU joins the endpoint as it starts")

		By("waiting for the guest to run the workload and power off")
		dom.WaitState("shut off", 2*time.Minute)
		// libvirt runs QEMU as libvirt-qemu, which the hook let into the
		// volume (its root is the sandbox's, mode 0750) with an ACL: else
		// QEMU could not open it for the 9p device and would not start.
		Expect(got.Volume).NotTo(BeEmpty())
		Expect(os.ReadFile(dom.Console)).To(ContainSubstring("sluice-init: volume mounted at "+framework.GuestVolumeDir),
			"the guest mounts the VM's volume over 9p")
		_, err := unix.Getxattr(got.Volume, "system.posix_acl_access", nil)
		Expect(err).NotTo(HaveOccurred(), "the hook grants QEMU's user the volume with an ACL")
		res := consoleThrottle(dom.Console)
		Expect(res.Kernels).To(Equal(uint64(kernels)))
		Expect(res.Errors).To(BeZero())
		u := d.Usage(name)
		Expect(u.Kernels).To(Equal(uint64(kernels)), "usage outlives the VM")
		Expect(u.GPUNs).To(Equal(uint64(kernels*kernel.Nanoseconds())), "the sim accounts each kernel's length exactly")
		Expect(u.Errors).To(BeZero())

		By("checking that the hook deleted the VM on release")
		// libvirt runs the release hook after it reports the domain shut off.
		Eventually(func(g Gomega) {
			r := d.Ctl("vm", "get", name)
			g.Expect(r.ExitCode).To(Equal(1), "%s", r)
			g.Expect(r.Stderr).To(ContainSubstring("not found"))
		}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		Expect(framework.IsSocket(vm.Endpoint)).To(BeFalse(), "the endpoint socket is removed")
		Expect(framework.Sockets(filepath.Dir(vm.Endpoint))).To(BeEmpty())
		Eventually(dom.QEMURunning).WithTimeout(30*time.Second).Should(BeFalse(), "QEMU exits with the guest")
		Expect(framework.LeftoverQEMU(d.Dir)).To(BeEmpty())
	})
})

// consoleThrottle decodes the throttle result the guest's agent printed on
// the serial console (the first JSON object there).
func consoleThrottle(console string) framework.ThrottleResult {
	GinkgoHelper()
	data, err := os.ReadFile(console)
	Expect(err).NotTo(HaveOccurred())
	out := string(data)
	i := strings.Index(out, "{")
	Expect(i).To(BeNumerically(">=", 0), "the console should show the agent's JSON result:\n%s", out)
	var res framework.ThrottleResult
	Expect(json.NewDecoder(strings.NewReader(out[i:])).Decode(&res)).To(Succeed(), "decoding the console:\n%s", out)
	return res
}
