package abi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/internal/testdeps"
)

// The C header must describe exactly the layout this package implements.
// These tests compile a program against include/sluice_abi.h that prints
// every constant, offset, size and helper result, and compare each with the
// Go side. Two further checks keep the tables honest: every object-like
// macro of the header and every exported constant of this package must
// appear in them.

const cHeader = "include/sluice_abi.h"

func (f cField) checks() []cCheck {
	return []cCheck{
		{fmt.Sprintf("offsetof(%s, %s)", f.strct, f.member), f.off},
		{fmt.Sprintf("sizeof(((%s *)0)->%s)", f.strct, f.member), f.size},
	}
}

func allCChecks(t *testing.T) ([]cCheck, Layout) {
	l, err := NewLayout(cHelperLayout)
	if err != nil {
		t.Fatal(err)
	}
	cs := cConstChecks()
	for _, f := range cFields() {
		cs = append(cs, f.checks()...)
	}
	cs = append(cs, cSizeChecks()...)
	cs = append(cs, cHelperChecks(t, l)...)
	return cs, l
}

// cProgram prints "expr<TAB>value" for every check.
func cProgram(cs []cCheck, l Layout) string {
	var b strings.Builder
	b.WriteString("#include <stdio.h>\n#include <string.h>\n#include \"sluice_abi.h\"\n\n")
	fmt.Fprintf(&b, "static unsigned char region[%d];\n\n", l.RegionSize)
	b.WriteString("int main(void)\n{\n\tvoid *base = region;\n\tstruct sluice_header h;\n\tmemset(&h, 0, sizeof h);\n")
	fmt.Fprintf(&b, "\th.channels = %du;\n\th.ring_entries = %du;\n\th.syscall_slots = %du;\n", l.Channels, l.RingEntries, l.SyscallSlots)
	fmt.Fprintf(&b, "\th.channels_off = %du;\n\th.rings_off = %du;\n\th.syscall_off = %du;\n", l.ChannelsOff, l.RingsOff, l.SyscallOff)
	for _, c := range cs {
		if _, isStr := c.wantText(); isStr {
			fmt.Fprintf(&b, "\tprintf(\"%%s\\t%%s\\n\", %q, %s);\n", c.expr, c.expr)
			continue
		}
		fmt.Fprintf(&b, "\tprintf(\"%%s\\t%%llu\\n\", %q, (unsigned long long)(%s));\n", c.expr, c.expr)
	}
	b.WriteString("\treturn 0;\n}\n")
	return b.String()
}

// requireTool returns the path of a compiler (gcc, g++, clang: each its own
// Debian package); without it the test fails (internal/testdeps).
func requireTool(t *testing.T, name string) string {
	t.Helper()
	return testdeps.Tool(t, name, name)
}

// compile runs a compiler with a deadlock guard and returns its output
// binary; a failed compilation fails the test with the compiler's output.
func compile(t *testing.T, compiler string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, compiler, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, strings.Join(args, " "), err, out)
	}
}

func runProgram(t *testing.T, bin string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin).Output()
	if err != nil {
		t.Fatalf("running %s: %v", bin, err)
	}
	got := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		expr, val, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			t.Fatalf("malformed line %q", sc.Text())
		}
		got[expr] = val
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func compareCChecks(t *testing.T, cs []cCheck, got map[string]string) {
	t.Helper()
	distinct := make(map[string]bool)
	for _, c := range cs {
		distinct[c.expr] = true
	}
	if len(got) != len(distinct) {
		t.Errorf("program printed %d distinct values, want %d", len(got), len(distinct))
	}
	for _, c := range cs {
		want, isStr := c.wantText()
		v, ok := got[c.expr]
		switch {
		case !ok:
			t.Errorf("%s: not printed", c.expr)
		case v != want && isStr:
			t.Errorf("%s = %q in C, %q in Go", c.expr, v, want)
		case v != want:
			t.Errorf("%s = %s in C, %s in Go", c.expr, v, want)
		}
	}
}

var strictC = []string{"-Wall", "-Wextra", "-Werror", "-pedantic", "-Wconversion", "-Wsign-conversion", "-Wshadow", "-Wcast-qual", "-Wstrict-prototypes", "-Wmissing-prototypes"}

func TestCHeaderMatchesGo(t *testing.T) {
	cs, l := allCChecks(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "abi_check.c")
	if err := os.WriteFile(src, []byte(cProgram(cs, l)), 0o644); err != nil {
		t.Fatal(err)
	}
	inc, err := filepath.Abs("include")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		compiler string
		std      string
		extra    []string
	}{
		{"gcc", "-std=c99", strictC},
		{"gcc", "-std=c11", strictC},
		{"g++", "-std=c++11", []string{"-Wall", "-Wextra", "-Werror", "-pedantic", "-x", "c++"}},
		{"g++", "-std=c++17", []string{"-Wall", "-Wextra", "-Werror", "-pedantic", "-x", "c++"}},
	} {
		t.Run(tc.compiler+tc.std, func(t *testing.T) {
			cc := requireTool(t, tc.compiler)
			bin := filepath.Join(dir, strings.TrimLeft(tc.compiler+tc.std, "-"))
			args := append([]string{tc.std, "-O1", "-I", inc, "-o", bin}, tc.extra...)
			compile(t, cc, append(args, src)...)
			compareCChecks(t, cs, runProgram(t, bin))
		})
	}
}

// TestCHeaderCompilesAlone compiles the headers as the only includes of a
// translation unit, in the oldest dialects they support, and twice in one
// unit (the include guards).
func TestCHeaderCompilesAlone(t *testing.T) {
	inc, err := filepath.Abs("include")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const unit = `#include "sluice_abi.h"
#include "sluice_abi.h"
int sluice_check_unit(struct sluice_cmd *c);
int sluice_check_unit(struct sluice_cmd *c) { return (int)c->u.launch.grid[0] + (int)sizeof(struct sluice_syscall_slot); }
`
	// The syscall library on the CPU side, also twice.
	const sysUnit = `#include "sluice_syscall.h"
#include "sluice_syscall.h"
int sluice_check_sys(void *sys);
int sluice_check_sys(void *sys)
{
	struct sluice_sysret r = sluice_syscall(sluice_sys_slot(sys, 1), SLUICE_SYS_NULL, SLUICE_SYS_FLAG_BLOCKING, 0, 0);
	return (int)r.err;
}
`
	src := filepath.Join(dir, "unit.c")
	if err := os.WriteFile(src, []byte(unit+sysUnit), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ compiler, std, lang string }{
		{"gcc", "-std=c99", "c"},
		{"gcc", "-std=gnu99", "c"},
		{"gcc", "-std=c17", "c"},
		{"g++", "-std=c++98", "c++"},
		{"g++", "-std=c++11", "c++"},
		{"g++", "-std=c++20", "c++"},
	} {
		t.Run(tc.compiler+tc.std, func(t *testing.T) {
			cc := requireTool(t, tc.compiler)
			compile(t, cc, tc.std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", inc, "-x", tc.lang, "-c", "-o", filepath.Join(dir, "unit.o"), src)
		})
	}
}

// TestCTablesCoverGo checks that every exported constant of the package is
// named in cConstChecks, and every object-like macro of the header is one of
// the checked expressions, so that neither side can grow unchecked.
func TestCTablesCoverGo(t *testing.T) {
	fset := token.NewFileSet()
	pkgConsts := make(map[string]bool)
	var checked map[string]bool
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, "_test.go") {
			if name == "abi_c_tables_test.go" {
				checked = identsIn(f, "cConstChecks")
			}
			continue
		}
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.CONST {
				for _, s := range gd.Specs {
					for _, n := range s.(*ast.ValueSpec).Names {
						if n.IsExported() {
							pkgConsts[n.Name] = true
						}
					}
				}
			}
		}
	}
	if len(pkgConsts) < 100 {
		t.Fatalf("found only %d exported constants: the parse went wrong", len(pkgConsts))
	}
	for name := range pkgConsts {
		if !checked[name] {
			t.Errorf("exported constant %s is not compared with the C header in cConstChecks", name)
		}
	}

	hdr, err := os.ReadFile(cHeader)
	if err != nil {
		t.Fatal(err)
	}
	notValues := map[string]bool{"SLUICE_ABI_H": true, "SLUICE_INLINE": true, "SLUICE_STATIC_ASSERT": true}
	exprs := make(map[string]bool)
	for _, c := range cConstChecks() {
		exprs[c.expr] = true
	}
	macro := regexp.MustCompile(`(?m)^#\s*define\s+(SLUICE_\w+)(?:[ \t]|$)`)
	n := 0
	for _, m := range macro.FindAllStringSubmatch(string(hdr), -1) {
		n++
		if !notValues[m[1]] && !exprs[m[1]] {
			t.Errorf("macro %s of %s is not compared with Go in cConstChecks", m[1], cHeader)
		}
	}
	if n < 100 {
		t.Fatalf("found only %d macros in %s: the pattern went wrong", n, cHeader)
	}
}

func identsIn(f *ast.File, fn string) map[string]bool {
	ids := make(map[string]bool)
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == fn {
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok {
					ids[id.Name] = true
				}
				return true
			})
		}
	}
	return ids
}

// TestCTables checks the tables themselves: each view of a struct lists its
// members in order, without gaps or overlaps, up to the struct's size; the
// C opcode names are the Go names.
func TestCTables(t *testing.T) {
	sizes := map[string]uint64{
		"header": HeaderSize, "channel": ChannelDescSize, "slot": SyscallSlotSize, "ring": SyscallRingEntrySize, "reloc": RelocSize,
		"prog": ProgArgsBaseSize, "prog/sys_one": SysOneBlobSize, "prog/null": NullBlobSize, "prog/sweep": SweepBlobSize, "prog/wc": WCBlobSize,
	}
	groups := make(map[string][]cField)
	for _, f := range cFields() {
		if strings.HasPrefix(f.member, "args[") {
			continue // a spot check inside args, not a member of its own
		}
		groups[f.group] = append(groups[f.group], f)
	}
	const views = 5 + 2*7 + 1 + 5 // header, channel, slot, ring entry, reloc; record and payload views; raw; programs
	if len(groups) != views {
		t.Errorf("%d struct views, want %d", len(groups), views)
	}
	for g, fs := range groups {
		size, start := sizes[g], uint64(0)
		switch {
		case strings.HasPrefix(g, "cmd/"):
			size = RecordSize
		case strings.HasPrefix(g, "payload/"):
			size = RecordSize - RecArg0
		}
		for _, f := range fs {
			if f.off != start {
				t.Errorf("%s: %s at %d, previous member ends at %d", g, f.member, f.off, start)
			}
			start = f.off + f.size
		}
		if start != size {
			t.Errorf("%s: members end at %d, struct has %d bytes", g, start, size)
		}
	}
	exprs := make(map[string]string)
	for _, c := range cConstChecks() {
		if _, dup := exprs[c.expr]; dup {
			t.Errorf("%s checked twice", c.expr)
		}
		exprs[c.expr], _ = c.wantText()
	}
	for _, op := range Opcodes() {
		name := "SLUICE_OP_" + op.String()
		if v, ok := exprs[name]; !ok || v != strconv.Itoa(int(op)) {
			t.Errorf("opcode %d: want %s = %d in the table, have %s (present: %v)", op, name, op, v, ok)
		}
	}
}
