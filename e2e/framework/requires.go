package framework

import (
	"fmt"
	"os"
	"runtime"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"

	"github.com/sluice-gpu/sluice/internal/testdeps"
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
		ginkgo.Skip("requires root (running as uid " + itoa(int64(os.Geteuid())) + "): run make test as root")
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

// requireTools fails the spec unless every command (first) is on PATH,
// naming the Debian package (second) that has it; where SLUICE_ALLOW_MISSING
// names that package the spec skips instead (internal/testdeps).
func requireTools(tools [][2]string) {
	ginkgo.GinkgoHelper()
	for _, tp := range tools {
		testdeps.Tool(specTB{}, tp[0], tp[1])
	}
}

// specTB is testdeps.TB for a spec: Ginkgo's failures and skips, located
// past the helpers (ginkgo.GinkgoT's are located inside Ginkgo).
type specTB struct{}

func (specTB) Helper() { types.MarkAsHelper(1) }

func (specTB) Fatal(args ...any) {
	ginkgo.GinkgoHelper()
	ginkgo.Fail(fmt.Sprint(args...))
}

func (specTB) Skip(args ...any) {
	ginkgo.GinkgoHelper()
	ginkgo.Skip(fmt.Sprint(args...))
}
