package framework

import (
	"os"
	"runtime"

	"github.com/onsi/ginkgo/v2"
)

// RequiresLinux skips the spec unless it runs on Linux (eventfds, memfds
// and ivshmem endpoints are Linux-only).
func RequiresLinux() {
	if runtime.GOOS != "linux" {
		ginkgo.Skip("requires Linux: the mediator's endpoints use eventfds and memfds (running on " + runtime.GOOS + ")")
	}
}

// RequiresRoot skips the spec unless it runs as root.
func RequiresRoot() {
	if os.Geteuid() != 0 {
		ginkgo.Skip("requires root (running as uid " + itoa(int64(os.Geteuid())) + ")")
	}
}

// RequiresKVM skips the spec unless /dev/kvm can be opened read-write.
func RequiresKVM() {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		ginkgo.Skip("requires KVM: cannot open /dev/kvm: " + err.Error())
	}
	f.Close()
}
