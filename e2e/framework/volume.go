package framework

import (
	"path"
	"path/filepath"
	"slices"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// GuestVolumeDir is where a QEMU guest's init mounts the VM's volume (the
// virtio-9p device tagged sluice-volume).
const GuestVolumeDir = "/volume"

// WriteVolumeFiles has the guest write files into its volume through 9p, as
// a program in the guest would (sluice-agent fs write, one call per file, in
// name order). Names are relative to the volume and use slashes; missing
// directories are created. The VM's GPU system calls see the volume as their
// root, so a spec can then run a GPU program over the files: "in/a.txt"
// written here is "/in/a.txt" to it, and g.VolumePath("in/a.txt") on the
// host.
func (g *Guest) WriteVolumeFiles(files map[string]string) {
	ginkgo.GinkgoHelper()
	g.requireVolume()
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		r := g.Exec("fs", "write", g.guestVolumePath(name), files[name])
		gomega.Expect(r.ExitCode).To(gomega.Equal(0), "guest %s writing %s: %s", g.Name, name, r)
	}
}

// ReadVolumeFile reads a file of the volume from inside the guest.
func (g *Guest) ReadVolumeFile(name string) string {
	ginkgo.GinkgoHelper()
	g.requireVolume()
	r := g.Exec("fs", "read", g.guestVolumePath(name))
	gomega.Expect(r.ExitCode).To(gomega.Equal(0), "guest %s reading %s: %s", g.Name, name, r)
	return r.Stdout
}

// VolumePath is where a file of the volume is on the host.
func (g *Guest) VolumePath(name string) string {
	ginkgo.GinkgoHelper()
	g.requireVolume()
	gomega.Expect(filepath.IsLocal(filepath.FromSlash(name))).To(gomega.BeTrue(), "volume file %q: want a relative path inside the volume", name)
	return filepath.Join(g.Volume, filepath.FromSlash(name))
}

func (g *Guest) guestVolumePath(name string) string {
	ginkgo.GinkgoHelper()
	gomega.Expect(filepath.IsLocal(filepath.FromSlash(name))).To(gomega.BeTrue(), "volume file %q: want a relative path inside the volume", name)
	return path.Join(GuestVolumeDir, name)
}

func (g *Guest) requireVolume() {
	ginkgo.GinkgoHelper()
	gomega.Expect(g.Volume).NotTo(gomega.BeEmpty(),
		"guest %s has no volume: the daemon reported none for the VM (hostapi.VM.Volume), so vm start shared nothing over 9p", g.Name)
}
