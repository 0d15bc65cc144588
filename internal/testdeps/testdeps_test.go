package testdeps

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTB records how Missing ended a test.
type fakeTB struct{ fatal, skip []string }

func (*fakeTB) Helper()             {}
func (f *fakeTB) Fatal(args ...any) { f.fatal = append(f.fatal, fmt.Sprint(args...)) }
func (f *fakeTB) Skip(args ...any)  { f.skip = append(f.skip, fmt.Sprint(args...)) }

func TestMissing(t *testing.T) {
	for _, tt := range []struct {
		env      string
		wantSkip bool
	}{
		{"", false},
		{"postgresql", false},
		{"clang", true},
		{"postgresql, clang", true},
		{"all", true},
		{"clang-14", false},
	} {
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv(Env, tt.env)
			var f fakeTB
			Missing(&f, "clang", "clang not found in PATH")
			got, other := f.fatal, f.skip
			if tt.wantSkip {
				got, other = f.skip, f.fatal
			}
			if len(got) != 1 || len(other) != 0 {
				t.Fatalf("fatal %q skip %q, want one %s", f.fatal, f.skip, map[bool]string{true: "skip", false: "fatal"}[tt.wantSkip])
			}
			for _, want := range []string{Prefix + "clang: clang not found in PATH", "apt-get install clang", Env + "=clang"} {
				if !strings.Contains(got[0], want) {
					t.Errorf("message %q lacks %q", got[0], want)
				}
			}
		})
	}
}

func TestTool(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "sluice-fake-tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	t.Setenv(Env, "")
	var f fakeTB
	if got := Tool(&f, "sluice-fake-tool", "fake"); got != tool || len(f.fatal)+len(f.skip) != 0 {
		t.Errorf("present tool: path %q, fatal %q, skip %q", got, f.fatal, f.skip)
	}
	if got := Tool(&f, "sluice-absent-tool", "absent"); got != "" || len(f.fatal) != 1 || !strings.Contains(f.fatal[0], "sluice-absent-tool not found") {
		t.Errorf("absent tool: path %q, fatal %q", got, f.fatal)
	}
}

func TestBlocked(t *testing.T) {
	t.Setenv(Env, "libvirt-daemon-system")
	var f fakeTB
	Blocked(&f, "libvirt-daemon-system", "a libvirtd runs", "systemctl stop libvirtd")
	if len(f.skip) != 1 || len(f.fatal) != 0 || f.skip[0] != Prefix+"libvirt-daemon-system: a libvirtd runs (fix: systemctl stop libvirtd; "+Env+"=libvirt-daemon-system skips instead)" {
		t.Errorf("fatal %q skip %q", f.fatal, f.skip)
	}
	t.Setenv(Env, "")
	f = fakeTB{}
	Missing(&f, "schemathesis", "st not found")
	if len(f.fatal) != 1 || !strings.Contains(f.fatal[0], "PyPI") || strings.Contains(f.fatal[0], "apt-get") {
		t.Errorf("schemathesis: fatal %q skip %q", f.fatal, f.skip)
	}
}
