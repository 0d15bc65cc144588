package e2e

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"strings"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/e2e/framework"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// wordChunk is the wordcount program's pread size in these specs: small, so
// that files span many chunks and words straddle chunk boundaries.
const wordChunk = 4096

var _ = Describe("GPU system calls", func() {
	It("counts the words of files in a process guest's volume with a GPU program", Label("process"), func() {
		framework.RequiresLinux()
		d := framework.StartDaemon(framework.DaemonOptions{})
		vm := d.CreateVM(framework.NewVM("wc-proc", framework.WithChannels(1)))
		Expect(vm.Volume).NotTo(BeEmpty(), "every VM gets a volume (default STATE_DIR/volumes/NAME)")

		By("writing the texts into the volume on the host")
		files := wordTexts(GinkgoRandomSeed())
		framework.WriteHostVolumeFiles(vm.Volume, files)

		checkSyscalls(d, vm.Name, files, func(args ...string) framework.Result {
			return d.Agent(vm.Endpoint, args...)
		})
	})

	It("counts the words of files a QEMU guest wrote into its volume over 9p, with the guest's GPU program", Label("qemu"), func() {
		framework.RequiresQEMU()
		d := framework.StartDaemon(framework.DaemonOptions{})
		vm := d.CreateVM(framework.NewVM("wc-qemu", framework.WithChannels(1)))
		Expect(vm.Volume).NotTo(BeEmpty(), "every VM gets a volume (default STATE_DIR/volumes/NAME)")
		g := d.StartGuest(vm.Name)
		Expect(g.Volume).To(Equal(vm.Volume), "vm start shares the VM's volume with the guest")

		By("the guest writes the texts into /volume/in over 9p")
		files := wordTexts(GinkgoRandomSeed())
		g.WriteVolumeFiles(files)

		// The guest's agent reaches the device over PCI (ivshmem).
		checkSyscalls(d, vm.Name, files, g.Exec)
	})
})

// checkSyscalls runs the wordcount program and two failing openat calls
// through run (the agent, as a process guest or inside a QEMU guest) and
// checks them against the texts and the VM's system-call counters.
func checkSyscalls(d *framework.Daemon, name string, files map[string]string, run func(args ...string) framework.Result) {
	GinkgoHelper()
	var paths []string
	var wantWords, wantBytes uint64
	for _, f := range slices.Sorted(maps.Keys(files)) {
		paths = append(paths, "/"+f) // the sandbox's root is the volume
		wantWords += countWords(files[f])
		wantBytes += uint64(len(files[f]))
	}
	before := syscallCalls(d.GetVM(name))["openat"]

	By(fmt.Sprintf("counting the words of %d files (%d bytes, %d words) with the GPU program", len(paths), wantBytes, wantWords))
	args := append([]string{"run", "wordcount"}, paths...)
	args = append(args, "--json", "--chunk", fmt.Sprint(wordChunk), "--groups", "3")
	wc := framework.Decode[framework.WordCountResult](run(args...))
	Expect(wc.Errno).To(BeZero(), "no system call of the program fails")
	Expect(wc.Files).To(Equal(len(paths)))
	Expect(wc.Bytes).To(Equal(wantBytes), "the program reads every byte of the files")
	Expect(wc.Words).To(Equal(wantWords), "the GPU's count equals the reference count of the same texts")
	AddReportEntry("wordcount", fmt.Sprintf("%d files, %d bytes, %d words", wc.Files, wc.Bytes, wc.Words))

	By("openat of a missing file fails with ENOENT")
	res := framework.Decode[framework.SyscallResult](run("run", "syscall", "openat", "AT_FDCWD", "/in/missing", "O_RDONLY", "--json"))
	Expect(res.Errno).To(Equal(2), "ENOENT")
	Expect(res.Ret).To(Equal(int64(-1)))

	By("openat cannot climb out of the volume")
	res = framework.Decode[framework.SyscallResult](run("run", "syscall", "openat", "AT_FDCWD", "/../../etc/passwd", "O_RDONLY", "--json"))
	Expect(res.Errno).To(Equal(2), "/.. is / in the sandbox: there is no /etc/passwd in the volume")
	Expect(res.Ret).To(Equal(int64(-1)))

	By("the daemon counts the VM's system calls")
	vm := d.GetVM(name)
	Expect(vm.Syscalls).NotTo(BeNil(), "vm get shows the VM's system calls")
	calls := syscallCalls(vm)
	Expect(calls["openat"]).To(BeNumerically(">", 0))
	Expect(calls["openat"]-before).To(BeNumerically(">=", len(paths)+2), "one openat per file and the two failing ones: %v", calls)
	Expect(calls["pread64"]).To(BeNumerically(">", 0), "%v", calls)
	Expect(vm.Syscalls.Errnos["ENOENT"]).To(BeNumerically(">=", 2), "%v", vm.Syscalls.Errnos)
	Expect(vm.Syscalls.ProxyState).To(Equal("running"))
}

func syscallCalls(vm hostapi.VM) map[string]uint64 {
	if vm.Syscalls == nil {
		return nil
	}
	return vm.Syscalls.Calls
}

// isWordSep reports the bytes that separate words: space, \t, \n, \v, \f, \r.
func isWordSep(b byte) bool {
	switch b {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}

// countWords is the reference count: a word is a maximal run of bytes other
// than the separators.
func countWords(s string) uint64 {
	var n uint64
	in := false
	for i := 0; i < len(s); i++ {
		sep := isWordSep(s[i])
		if !sep && !in {
			n++
		}
		in = !sep
	}
	return n
}

// wordTexts makes the files of the wordcount specs, under in/: random words
// (ASCII, punctuation, multi-byte UTF-8) separated by runs of every
// separator, from a few KiB to 200 KiB; words longer than a chunk and more
// than two chunks long, words straddling chunk boundaries, a file of exactly
// two chunks, one of separators only, and an empty one.
func wordTexts(seed int64) map[string]string {
	r := rand.New(rand.NewPCG(uint64(seed), 0x5ca1ab1e))
	letters := []string{"a", "b", "e", "k", "q", "z", "Q", "7", "-", "'", ",", "\"", "ü", "ß", "語", "é"}
	seps := " \t\n\v\f\r"
	word := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString(letters[r.IntN(len(letters))])
		}
		return b.String()
	}
	sep := func() string {
		var b strings.Builder
		for range 1 + r.IntN(3) {
			b.WriteByte(seps[r.IntN(len(seps))])
		}
		return b.String()
	}
	text := func(size int, long ...int) string {
		var b strings.Builder
		if r.IntN(2) == 0 {
			b.WriteString(sep()) // a leading separator, sometimes
		}
		for b.Len() < size {
			if len(long) > 0 && b.Len() >= size*(4-len(long))/4 {
				b.WriteString(word(long[0]))
				long = long[1:]
			} else {
				b.WriteString(word(1 + r.IntN(12)))
			}
			b.WriteString(sep())
		}
		return b.String()
	}
	// A word across the first chunk boundary, then one exactly ending at it.
	straddle := strings.Repeat("x ", (wordChunk-6)/2) + "abcdefghij" + sep()
	exact := text(2*wordChunk - 200)
	exact = exact[:min(len(exact), 2*wordChunk-100)]
	exact += strings.Repeat(" ", 2*wordChunk-len(exact)-7) + "endword"
	files := map[string]string{
		"in/a.txt":        text(3 << 10),
		"in/b.txt":        text(40<<10, 5000, 9000, wordChunk), // longer than one and than two chunks, exactly one
		"in/c.txt":        text(200<<10, 3*wordChunk+17),
		"in/straddle.txt": straddle + text(6<<10),
		"in/exact.txt":    exact,
		"in/blank.txt":    strings.Repeat(" \t\n\v\f\r", 1500), // separators only, over two chunks
		"in/empty.txt":    "",
		"in/dash.txt":     "-n --not-a-flag - of words", // a text is no flag of the agent's
	}
	for name, t := range files {
		Expect(path.Dir(name)).To(Equal("in"))
		if name == "in/exact.txt" {
			Expect(t).To(HaveLen(2 * wordChunk))
		}
	}
	return files
}
