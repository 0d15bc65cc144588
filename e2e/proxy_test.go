package e2e

import (
	"fmt"
	"syscall"
	"time"

	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("The syscall proxy", Label("process"), func() {
	It("fails a killed proxy's calls with EIO, restarts it, and no other VM notices", func() {
		framework.RequiresLinux()
		d := framework.StartDaemon(framework.DaemonOptions{})
		a := d.CreateVM(framework.NewVM("victim", framework.WithChannels(2)))
		b := d.CreateVM(framework.NewVM("bystander", framework.WithChannels(1)))
		call := func(ep string, args ...string) framework.SyscallResult {
			return framework.Decode[framework.SyscallResult](d.Agent(ep, append(append([]string{"run", "syscall"}, args...), "--json")...))
		}
		Expect(call(b.Endpoint, "null")).To(Equal(framework.SyscallResult{}))
		Eventually(func() string { return d.GetVM(b.Name).Syscalls.ProxyState }).WithTimeout(framework.ConvergeTimeout).Should(Equal("running"))
		bPid := d.GetVM(b.Name).Syscalls.ProxyPID

		By("a call that blocks in the victim's proxy: recvfrom on a UDP socket nobody sends to")
		sock := call(a.Endpoint, "socket", "AF_INET", "SOCK_DGRAM", "0")
		Expect(sock.Errno).To(BeZero())
		blocked := d.StartAgent(a.Endpoint, "run", "syscall", "recvfrom", fmt.Sprint(sock.Ret), "@64", "64", "0", "--json", "--channel", "1")
		Eventually(func() int { return d.GetVM(a.Name).Syscalls.InFlight }, framework.ConvergeTimeout).Should(Equal(1))
		aPid := d.GetVM(a.Name).Syscalls.ProxyPID
		Expect(aPid).NotTo(BeZero())

		By("killing the victim's proxy")
		Expect(syscall.Kill(aPid, syscall.SIGKILL)).To(Succeed())
		res := framework.Decode[framework.SyscallResult](blocked.WaitTimeout(20 * time.Second))
		Expect(res).To(Equal(framework.SyscallResult{Ret: -1, Errno: int(syscall.EIO)}), "the call in flight fails with EIO")

		By("a fresh proxy serves the victim; the bystander's never stopped")
		Eventually(func() bool {
			s := d.GetVM(a.Name).Syscalls
			return s.ProxyState == "running" && s.ProxyPID != aPid && s.ProxyRestarts == 1
		}, framework.ConvergeTimeout).Should(BeTrue())
		Expect(call(a.Endpoint, "null")).To(Equal(framework.SyscallResult{}))
		bs := d.GetVM(b.Name).Syscalls
		Expect(bs.ProxyPID).To(Equal(bPid))
		Expect(bs.ProxyRestarts).To(BeZero())
		Expect(call(b.Endpoint, "null")).To(Equal(framework.SyscallResult{}))
	})

	It("sweeps a file with pread from GPU work-items, work-groups and a kernel", func() {
		framework.RequiresLinux()
		d := framework.StartDaemon(framework.DaemonOptions{})
		vm := d.CreateVM(framework.NewVM("sweep", framework.WithChannels(1)))
		blob := make([]byte, 300_001)
		var sum uint64
		for i := range blob {
			blob[i] = byte(i*7 + i/251)
			sum += uint64(blob[i])
		}
		framework.WriteHostVolumeFiles(vm.Volume, map[string]string{"blob": string(blob)})
		type sweep struct{ Size, Bytes, Failed, Sum uint64 }
		for _, g := range []string{"work-item", "work-group", "kernel"} {
			for _, o := range []string{"strong", "relaxed"} {
				got := framework.Decode[sweep](d.Agent(vm.Endpoint, "run", "sweep", "--path", "/blob", "--granularity", g, "--ordering", o, "--json"))
				Expect(got).To(Equal(sweep{Size: uint64(len(blob)), Bytes: uint64(len(blob)), Sum: sum}), "%s, %s", g, o)
			}
		}
	})

	It("runs each call in the context it names", func() {
		framework.RequiresLinux()
		d := framework.StartDaemon(framework.DaemonOptions{})
		vm := d.CreateVM(framework.NewVM("contexts", framework.WithChannels(1)))
		call := func(args ...string) framework.SyscallResult {
			return framework.Decode[framework.SyscallResult](d.Agent(vm.Endpoint, append(append([]string{"run", "syscall"}, args...), "--json")...))
		}

		By("a context never registered")
		Expect(call("openat", "AT_FDCWD", "/", "O_RDONLY", "--context", "9").Errno).To(Equal(int(syscall.ESRCH)))

		By("the default context (the sandbox's root) creates a private file")
		created := call("openat", "AT_FDCWD", "/secret", "O_CREAT|O_WRONLY", "0600")
		Expect(created.Errno).To(BeZero())

		By("a context of uid 1000 cannot read it, the default context can")
		id := d.Agent(vm.Endpoint, "context", "register", "--uid", "1000", "--gid", "1000", "--cwd", "/")
		ctx := fmt.Sprint(framework.Decode[int](id))
		Expect(call("openat", "AT_FDCWD", "/secret", "O_RDONLY", "--context", ctx).Errno).To(Equal(int(syscall.EACCES)))
		Expect(call("openat", "AT_FDCWD", "/secret", "O_RDONLY").Errno).To(BeZero())

		By("a context's files are its own: the default context's fd is not open in it")
		Expect(call("close", fmt.Sprint(created.Ret), "--context", ctx).Errno).To(Equal(int(syscall.EBADF)))
	})
})
