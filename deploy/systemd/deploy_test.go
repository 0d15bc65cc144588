package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/internal/testdeps"
)

var units = []string{"sluiced.service", "sluice-controller.service"}

// stubBin is a directory of executables named as Sluice's binaries.
func stubBin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range []string{"sluiced", "sluice-proxy", "sluicectl", "sluice-controller", "sluice-libvirt-hook"} {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestUnitsVerify runs systemd-analyze verify on the units, their
// binaries pointed at stubs (verify wants ExecStart to exist). Any warning
// fails.
func TestUnitsVerify(t *testing.T) {
	analyze := testdeps.Tool(t, "systemd-analyze", "systemd")
	bin, dir := stubBin(t), t.TempDir()
	var paths []string
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "ExecStart=/usr/local/bin/") {
			t.Fatalf("%s: ExecStart is not in /usr/local/bin, where install.sh puts the binaries", u)
		}
		p := filepath.Join(dir, u)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/", bin+"/")), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := exec.Command(analyze, append([]string{"verify", "--man=no"}, paths...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestUnitsKeepWhatSluicedNeeds: hardening must not take away the
// namespaces the proxies' sandbox creates, nor the GPU's devices.
func TestUnitsKeepWhatSluicedNeeds(t *testing.T) {
	b, err := os.ReadFile("sluiced.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"RestrictNamespaces=user mnt pid ipc uts net\n", "NoNewPrivileges=yes\n", "ProtectSystem=strict\n",
		"ReadWritePaths=/var/lib/sluice /run/sluice\n", "StateDirectory=sluice\n", "RuntimeDirectory=sluice\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("sluiced.service lacks %q", want)
		}
	}
	for _, line := range strings.Split(unit, "\n") {
		for _, bad := range []string{"PrivateDevices=", "DevicePolicy=", "MemoryDenyWriteExecute=", "CapabilityBoundingSet=", "PrivateUsers=", "ProtectProc="} {
			if strings.HasPrefix(line, bad) {
				t.Errorf("sluiced.service sets %s, which breaks the cuda backend or the proxies' sandbox", line)
			}
		}
	}
}

// TestScriptsParse: every deploy script is valid bash (and passes
// shellcheck where it is installed).
func TestScriptsParse(t *testing.T) {
	scripts, err := filepath.Glob("../*.sh")
	if err != nil || len(scripts) < 2 {
		t.Fatalf("scripts %q: %v", scripts, err)
	}
	for _, s := range scripts {
		if out, err := exec.Command("bash", "-n", s).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", s, err, out)
		}
	}
	if sc, err := exec.LookPath("shellcheck"); err == nil {
		for _, s := range []string{"../install.sh", "../install-libvirt-hook.sh"} {
			if out, err := exec.Command(sc, s).CombinedOutput(); err != nil {
				t.Errorf("shellcheck %s: %v\n%s", s, err, out)
			}
		}
	}
}

func runInstall(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("bash", append([]string{"../install.sh"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestInstallIsIdempotent installs into a directory twice: everything is
// there, the settings and the controller's token are made once and kept.
func TestInstallIsIdempotent(t *testing.T) {
	testdeps.Tool(t, "bash", "bash")
	if out := runInstall(t, "--help"); !strings.Contains(out, "--destdir DIR") || !strings.Contains(out, "bootstrap operator token") {
		t.Errorf("--help:\n%s", out)
	}
	if out, err := exec.Command("bash", "../install.sh", "--only", "gpu").CombinedOutput(); err == nil || !strings.Contains(string(out), "want host or controller") {
		t.Errorf("--only gpu: %v\n%s", err, out)
	}
	bin, root := stubBin(t), t.TempDir()
	runInstall(t, "--bin", bin, "--destdir", root)
	files := []string{
		"usr/local/bin/sluiced", "usr/local/bin/sluice-proxy", "usr/local/bin/sluicectl", "usr/local/bin/sluice-controller",
		"usr/local/bin/sluice-libvirt-hook", "etc/systemd/system/sluiced.service", "etc/systemd/system/sluice-controller.service",
		"etc/sluice/sluiced.env", "etc/sluice/sluice-controller.env", "etc/libvirt/hooks/qemu.d/sluice",
		"usr/local/share/sluice/grafana/sluice.json", "usr/local/share/doc/sluice/controller.md", "var/lib/sluice",
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	envPath := filepath.Join(root, "etc/sluice/sluice-controller.env")
	env, err := os.ReadFile(envPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(envPath); fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600 (it holds a token)", envPath, fi.Mode().Perm())
	}
	if !strings.Contains(string(env), "SLUICE_CONTROLLER_BOOTSTRAP_TOKEN=slc_boot_") || len(env) < 200 {
		t.Errorf("controller settings without a token:\n%s", env)
	}
	// The operator edits the settings; a second run keeps them.
	if err := os.WriteFile(filepath.Join(root, "etc/sluice/sluiced.env"), []byte("SLUICED_OPTS=--backend cuda\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runInstall(t, "--bin", bin, "--destdir", root)
	if !strings.Contains(out, "kept "+envPath) {
		t.Errorf("second run:\n%s", out)
	}
	if again, _ := os.ReadFile(envPath); string(again) != string(env) {
		t.Error("a second run changed the controller's token")
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/sluice/sluiced.env")); string(b) != "SLUICED_OPTS=--backend cuda\n" {
		t.Errorf("a second run changed sluiced.env: %q", b)
	}
	// --only controller installs no host part.
	root2 := t.TempDir()
	runInstall(t, "--bin", bin, "--destdir", root2, "--only", "controller")
	if _, err := os.Stat(filepath.Join(root2, "usr/local/bin/sluiced")); err == nil {
		t.Error("--only controller installed sluiced")
	}
}
