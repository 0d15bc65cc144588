package kernels

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/internal/testdeps"
)

// clangMajor is the clang that generated the checked-in PTX; another
// version writes different (equivalent) PTX.
const clangMajor = 14

var entryRe = regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(\n\t\.param \.align 8 \.b8 \w+\[(\d+)\]\n\)`)

// TestPTXDeclaresEveryKernel checks that the module has exactly the
// programs of api/abi, each taking one parameter of its blob's size, for the
// target the package announces.
func TestPTXDeclaresEveryKernel(t *testing.T) {
	for _, want := range []string{".version " + PTXVersion + "\n", ".target " + Target + "\n", ".address_size 64\n"} {
		if !bytes.Contains(PTX, []byte(want)) {
			t.Errorf("PTX lacks %q", want)
		}
	}
	got := make(map[string]int)
	for _, m := range entryRe.FindAllSubmatch(PTX, -1) {
		n, _ := strconv.Atoi(string(m[2]))
		got[string(m[1])] = n
	}
	if all := bytes.Count(PTX, []byte(".entry ")); all != len(got) {
		t.Errorf("%d .entry directives, %d of the expected form (one by-value blob parameter)", all, len(got))
	}
	for _, name := range Names {
		size, ok := got[name]
		switch {
		case !ok:
			t.Errorf("PTX has no .entry %s", name)
		case size != BlobSize[name]:
			t.Errorf(".entry %s takes %d bytes, its blob has %d", name, size, BlobSize[name])
		}
		delete(got, name)
	}
	for name := range got {
		t.Errorf("PTX has .entry %s, which is not a program of the ABI", name)
	}
	if len(BlobSize) != len(Names) {
		t.Errorf("BlobSize has %d programs, Names %d", len(BlobSize), len(Names))
	}
}

// TestPTXUpToDate regenerates the PTX with gen.sh and compares it with the
// checked-in file.
func TestPTXUpToDate(t *testing.T) {
	clang := testdeps.Tool(t, "clang", "clang")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, clang, "--version").Output()
	if err != nil {
		t.Fatalf("clang --version: %v", err)
	}
	m := regexp.MustCompile(`clang version (\d+)\.`).FindSubmatch(out)
	if m == nil {
		testdeps.Missing(t, "clang", fmt.Sprintf("cannot tell clang's version from %q", out))
	}
	if v, _ := strconv.Atoi(string(m[1])); v != clangMajor {
		testdeps.Missing(t, "clang", fmt.Sprintf("clang %d, the checked-in PTX is clang %d's (Debian 12's)", v, clangMajor))
	}
	targets, err := exec.CommandContext(ctx, clang, "-print-targets").Output()
	if err != nil || !bytes.Contains(targets, []byte("nvptx64")) {
		testdeps.Missing(t, "clang", fmt.Sprintf("clang has no NVPTX target (%v)", err))
	}
	ptx := filepath.Join(t.TempDir(), "sluice_kernels.ptx")
	cmd := exec.CommandContext(ctx, "./gen.sh", ptx)
	cmd.Env = append(os.Environ(), "CLANG="+clang)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, out)
	}
	fresh, err := os.ReadFile(ptx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh, PTX) {
		t.Errorf("sluice_kernels.ptx is stale: run make ptx (or guest-agent/kernels/gen.sh) and commit it")
	}
}
