package framework

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"slices"
	"time"

	"github.com/sluice-gpu/sluice/guest-agent/control"

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
//
// A text longer than maxExecArg cannot be one argument of sluicectl (Linux
// limits each argument of an exec to 128 KiB, MAX_ARG_STRLEN): such a file
// goes through the guest's control port directly, with the same request
// sluicectl vm exec would send (package guest-agent/control), up to the
// port's line limit (control.MaxLine, 1 MiB, JSON-escaped).
func (g *Guest) WriteVolumeFiles(files map[string]string) {
	ginkgo.GinkgoHelper()
	g.requireVolume()
	for _, name := range sortedNames(files) {
		// "--": a text may start with a dash, which is no flag.
		args := []string{"fs", "write", "--", g.guestVolumePath(name), files[name]}
		if len(files[name]) <= maxExecArg {
			r := g.Exec(args...)
			gomega.Expect(r.ExitCode).To(gomega.Equal(0), "guest %s writing %s: %s", g.Name, name, r)
			continue
		}
		resp := g.controlExec(args...)
		gomega.Expect(resp.Exit).To(gomega.Equal(0), "guest %s writing %s (%d bytes) through the control port: stdout:\n%s\nstderr:\n%s",
			g.Name, name, len(files[name]), resp.Stdout, resp.Stderr)
	}
}

// maxExecArg is the longest argument the framework hands to sluicectl,
// well under Linux's MAX_ARG_STRLEN (32 pages: 128 KiB with the NUL).
const maxExecArg = 96 << 10

// controlExec runs an agent command line in the guest through its control
// socket (RUN_DIR/control.sock), as sluicectl vm exec does, without an
// exec of sluicectl in between.
func (g *Guest) controlExec(args ...string) control.Message {
	ginkgo.GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := control.Dial(dctx, filepath.Join(g.RunDir, "control.sock"))
	dcancel()
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "guest %s: connecting to its control port", g.Name)
	defer c.Close()
	resp, err := c.Exec(ctx, args...)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "guest %s: %s %s through the control port", g.Name, args[0], args[1])
	return resp
}

// WriteHostVolumeFiles writes files into a volume directory on the host, as
// an operator would for a process guest (which has no 9p): names relative to
// dir with slashes, files 0644 and directories 0755, so that the VM's
// system-call proxy, which is "other" to the host's files (its user
// namespace maps none of the host's ids), reads them.
func WriteHostVolumeFiles(dir string, files map[string]string) {
	ginkgo.GinkgoHelper()
	for _, name := range sortedNames(files) {
		gomega.Expect(filepath.IsLocal(filepath.FromSlash(name))).To(gomega.BeTrue(), "volume file %q: want a relative path inside the volume", name)
		p := filepath.Join(dir, filepath.FromSlash(name))
		for sub := filepath.Dir(p); sub != filepath.Clean(dir); sub = filepath.Dir(sub) {
			defer func() { gomega.Expect(os.Chmod(sub, 0o755)).To(gomega.Succeed()) }() // whatever the umask
		}
		gomega.Expect(os.MkdirAll(filepath.Dir(p), 0o755)).To(gomega.Succeed())
		gomega.Expect(os.WriteFile(p, []byte(files[name]), 0o644)).To(gomega.Succeed())
		gomega.Expect(os.Chmod(p, 0o644)).To(gomega.Succeed())
	}
}

func sortedNames(files map[string]string) []string {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
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
