// Package testdeps decides what a test does when the machine lacks
// something it needs, a tool or a server from a Debian package: it fails,
// naming the package (deploy/test-deps.sh installs every one of them), so
// that a run never passes with tests skipped for want of a tool. Only where
// SLUICE_ALLOW_MISSING names that package (or is "all") does the test skip
// instead, its message starting with Prefix, which make test's summary
// (internal/testsummary) lists apart and loudly.
package testdeps

import (
	"os"
	"os/exec"
	"strings"
)

// Env names the packages whose absence skips rather than fails: a comma
// separated list of Debian package names as the messages give them, or
// "all".
const Env = "SLUICE_ALLOW_MISSING"

// Prefix starts the message of every test skipped under Env.
const Prefix = "MISSING "

// Allowed reports whether Env lets pkg be missing.
func Allowed(pkg string) bool {
	for _, name := range strings.Split(os.Getenv(Env), ",") {
		if name = strings.TrimSpace(name); name == "all" || name == pkg {
			return true
		}
	}
	return false
}

// Message says that what is missing, from pkg, how to install it and how to
// skip instead.
func Message(pkg, what string) string {
	install := "apt-get install " + pkg + ", or deploy/test-deps.sh as root"
	if pkg == "schemathesis" {
		install = "deploy/test-deps.sh as root (PyPI, into a venv)"
	}
	return Prefix + pkg + ": " + what + " (install: " + install + "; " + Env + "=" + pkg + " skips instead)"
}

// TB is what Missing needs of a test: testing.TB and ginkgo.GinkgoT() have
// it.
type TB interface {
	Helper()
	Fatal(args ...any)
	Skip(args ...any)
}

// Missing ends t for want of pkg: a failure, or a skip where Allowed.
func Missing(t TB, pkg, what string) {
	t.Helper()
	end(t, pkg, Message(pkg, what))
}

// Blocked ends t as Missing does where pkg is installed but cannot be used
// by the test as the machine stands: why, and the fix.
func Blocked(t TB, pkg, why, fix string) {
	t.Helper()
	end(t, pkg, Prefix+pkg+": "+why+" (fix: "+fix+"; "+Env+"="+pkg+" skips instead)")
}

func end(t TB, pkg, msg string) {
	t.Helper()
	if Allowed(pkg) {
		t.Skip(msg)
		return
	}
	t.Fatal(msg)
}

// Tool returns the path of the command tool, which pkg installs; without
// it, Missing ends t.
func Tool(t TB, tool, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		Missing(t, pkg, tool+" not found in PATH")
	}
	return path
}
