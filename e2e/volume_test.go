package e2e

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("VM volumes", Label("qemu"), func() {
	BeforeEach(framework.RequiresQEMU)

	It("shares the VM's volume with its QEMU guest over virtio-9p, both ways", func() {
		d := framework.StartDaemon(framework.DaemonOptions{})
		vol := filepath.Join(d.Dir, "vol") // removed with the daemon's directory
		d.CreateVM(framework.NewVM("vol1", framework.WithVolume(vol)))
		g := d.StartGuest("vol1")
		Expect(g.Volume).To(Equal(vol), "vm start shares the VM's volume with the guest")
		Expect(os.ReadFile(g.SerialLog)).To(ContainSubstring("sluice-init: volume mounted at " + framework.GuestVolumeDir))

		By("the guest writes files, the host reads the same bytes")
		files := map[string]string{
			"in/a.txt":      "the quick brown fox\njumps over the lazy dog\n",
			"in/deep/b.txt": "grüße, 日本語,\ttab and \"quotes\"\n",
			"empty.txt":     "",
		}
		g.WriteVolumeFiles(files)
		for name, text := range files {
			path := g.VolumePath(name)
			Expect(os.ReadFile(path)).To(Equal([]byte(text)), "host side of %s", name)
			// The VM's system-call proxy runs in a user namespace that maps
			// none of QEMU's ids: it reads the guest's files as "other".
			st, err := os.Stat(path)
			Expect(err).NotTo(HaveOccurred())
			Expect(st.Mode().Perm()&0o004).NotTo(BeZero(), "%s (%v) must be readable by other", name, st.Mode())
			if sub := filepath.Dir(name); sub != "." { // the root is the daemon's: its owner is the proxy's root
				dir, err := os.Stat(g.VolumePath(sub))
				Expect(err).NotTo(HaveOccurred())
				Expect(dir.Mode().Perm()&0o005).To(Equal(os.FileMode(0o005)), "%s (%v) must be searchable by other", sub, dir.Mode())
			}
		}

		By("the host writes files, the guest reads them, and sees changes at once (cache=none)")
		Expect(os.MkdirAll(g.VolumePath("out"), 0o755)).To(Succeed())
		Expect(os.WriteFile(g.VolumePath("out/count.txt"), []byte("9\n"), 0o644)).To(Succeed())
		Expect(g.ReadVolumeFile("out/count.txt")).To(Equal("9\n"))
		Expect(os.WriteFile(g.VolumePath("out/count.txt"), []byte("10 words\n"), 0o644)).To(Succeed())
		Expect(g.ReadVolumeFile("out/count.txt")).To(Equal("10 words\n"))
		big := strings.Repeat("0123456789abcdef", 12<<10) // 192 KiB: several 9p messages at a small msize
		Expect(os.WriteFile(g.VolumePath("out/big.txt"), []byte(big), 0o644)).To(Succeed())
		Expect(g.ReadVolumeFile("out/big.txt")).To(Equal(big))

		By("the guest overwrites a file the host made")
		g.WriteVolumeFiles(map[string]string{"out/count.txt": "11\n"})
		Expect(os.ReadFile(g.VolumePath("out/count.txt"))).To(Equal([]byte("11\n")))
	})
})
