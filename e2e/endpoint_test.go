package e2e

import (
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// nobody is the user the specs' foreign guests run as.
const nobody = 65534

var _ = Describe("VM endpoints", Label("process"), func() {
	BeforeEach(framework.RequiresLinux)
	BeforeEach(framework.RequiresRoot)

	// openToAll lets every user reach the endpoint's socket, so that only
	// the endpoint's credential check stands between a user and the VM.
	openToAll := func(endpoint string) {
		Expect(os.Chmod(filepath.Dir(endpoint), 0o755)).To(Succeed())
		Expect(os.Chmod(endpoint, 0o666)).To(Succeed())
	}

	It("admit their owner and refuse every other user", func() {
		d := framework.StartDaemon(framework.DaemonOptions{Clock: framework.ClockVirtual})
		owned := d.CreateVM(framework.NewVM("owned", framework.WithChannels(1), framework.WithOwner("65534:65534")))
		Expect(owned.Owner).To(Equal("65534:65534"))
		other := d.CreateVM(framework.NewVM("other", framework.WithChannels(1)))
		openToAll(owned.Endpoint)
		openToAll(other.Endpoint)

		By("the owner's guest runs its kernels")
		res := framework.Decode[framework.ThrottleResult](d.StartAgentAs(nobody, nobody, owned.Endpoint,
			framework.ThrottleArgs(100*time.Microsecond, 20)...).Wait())
		Expect(res.Kernels).To(Equal(uint64(20)))
		Expect(d.Usage("owned").Kernels).To(Equal(uint64(20)))

		By("another user's guest is refused before it gets the memory")
		r := d.StartAgentAs(nobody, nobody, other.Endpoint, framework.ThrottleArgs(100*time.Microsecond, 20)...).Wait()
		Expect(r.ExitCode).NotTo(Equal(0), "%s", r)
		Expect(d.Usage("other").Kernels).To(BeZero(), "nothing billed to the VM")
		Expect(d.GetVM("other").RefusedPeers.Foreign).To(BeNumerically(">=", 1))
		Expect(d.CtlOK("vm", "get", "other")).To(MatchRegexp(`Refused peers: +\d+ foreign`))

		By("the user made its owner at run time is admitted")
		d.CtlOK("vm", "set", "other", "--owner", "nobody")
		res = framework.Decode[framework.ThrottleResult](d.StartAgentAs(nobody, nobody, other.Endpoint,
			framework.ThrottleArgs(100*time.Microsecond, 20)...).Wait())
		Expect(res.Kernels).To(Equal(uint64(20)))
		Expect(d.GetVM("other").Owner).To(Equal("65534"))
	})

	It("keep no slot for connections that never read their handshake", func() {
		d := framework.StartDaemon(framework.DaemonOptions{Clock: framework.ClockVirtual})
		vm := d.CreateVM(framework.NewVM("crowded", framework.WithChannels(1)))
		var stuck []net.Conn
		DeferCleanup(func() {
			for _, c := range stuck {
				c.Close()
			}
		})
		for range 6 { // more than the daemon's 4 peer slots
			c, err := net.Dial("unix", vm.Endpoint)
			Expect(err).NotTo(HaveOccurred())
			stuck = append(stuck, c)
		}
		By("a guest that comes after them joins at once")
		Expect(d.Throttle(vm.Endpoint, 100*time.Microsecond, 20).Kernels).To(Equal(uint64(20)))

		By("the handshake deadline drops them all")
		Eventually(func() uint64 { return d.GetVM("crowded").RefusedPeers.NoHandshake }).
			WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).To(Equal(uint64(6)))
		Expect(d.GetVM("crowded").Peers).To(BeZero())
	})
})
