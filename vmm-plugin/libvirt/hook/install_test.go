package hook

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/internal/testdeps"
)

// TestInstallScript installs the wrapper into a temporary HOOKS_DIR and runs
// it as libvirt would, with a stand-in binary that reports what it got.
func TestInstallScript(t *testing.T) {
	script, err := filepath.Abs("../../../deploy/install-libvirt-hook.sh")
	if err != nil {
		t.Fatal(err)
	}
	testdeps.Tool(t, "bash", "bash")
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake hook")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nprintf '%s|' \"$@\"; cat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	hooks := filepath.Join(dir, "hooks")
	install := func(args ...string) (string, error) {
		cmd := exec.Command(script, args...)
		cmd.Env = append(os.Environ(), "HOOKS_DIR="+hooks)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	socket := filepath.Join(dir, "it's sluiced.sock")
	out, err := install("--bin", bin, "--socket", socket)
	if err != nil || !strings.Contains(out, "restart libvirtd") {
		t.Fatalf("install: %v\n%s", err, out)
	}
	wrapper := filepath.Join(hooks, "qemu.d", "sluice")
	cmd := exec.Command(wrapper, "web", "prepare", "begin", "-")
	cmd.Env = []string{} // as scrubbed as libvirt's
	cmd.Stdin = strings.NewReader("<domain/>")
	got, err := cmd.Output()
	if want := "--socket|" + socket + "|web|prepare|begin|-|<domain/>"; err != nil || string(got) != want {
		t.Errorf("wrapper ran %q, %v; want %q", got, err, want)
	}

	if out, err := install("--bin", bin); err != nil || strings.Contains(out, "restart") {
		t.Errorf("reinstall: %v\n%s", err, out)
	}
	for _, bad := range [][]string{{"--bin", "relative/hook"}, {"--bin", filepath.Join(dir, "missing")}, {"--bogus"}} {
		if out, err := install(bad...); err == nil {
			t.Errorf("install %q succeeded:\n%s", bad, out)
		}
	}
	if out, err := install("--uninstall"); err != nil || !strings.Contains(out, "removed") {
		t.Errorf("uninstall: %v\n%s", err, out)
	}
	if _, err := os.Stat(wrapper); !os.IsNotExist(err) {
		t.Errorf("wrapper still there after --uninstall: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(hooks, "qemu.d"))
	if len(entries) != 0 {
		t.Errorf("qemu.d not empty: %v", entries)
	}
}
