// Package e2e is Sluice's end-to-end suite: it builds sluiced, sluicectl and
// sluice-agent and runs them together as an operator and guests would.
// Specs carry labels for what they need: process (nothing but Linux), qemu
// (QEMU and the guest image's Debian kernel), libvirt (libvirtd as root),
// later gpu. Select with --ginkgo.label-filter, or
// `make e2e E2E_LABELS=process`.
package e2e

import (
	"testing"

	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Sluice e2e")
}

var bins framework.Binaries

var _ = BeforeSuite(func() {
	var err error
	bins, err = framework.Build()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		Expect(framework.RemoveBinaries(bins)).To(Succeed())
	})
})

var _ = AfterSuite(func() {
	// Every spec's cleanups have run by now: nothing it started may remain.
	if bins.Dir != "" {
		left, err := framework.LeftoverProcesses(bins.Dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(left).To(BeEmpty(), "processes started by the suite are still running")
	}
	Expect(framework.SuiteQEMU()).To(BeEmpty(), "QEMU guests started by the suite are still running")
	Expect(framework.LeftoverDirs()).To(ConsistOf(bins.Dir), "only the binaries' directory should remain until the suite's cleanup")
})
