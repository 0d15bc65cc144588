package testsummary

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/sluice-gpu/sluice/internal/testdeps"
)

// goTestJSON is `go test -json` of two packages: one passes a test and
// skips two (one for a missing package), the other fails one; and a build
// failure.
var goTestJSON = strings.Join([]string{
	`{"Action":"start","Package":"ex/a"}`,
	`{"Action":"run","Package":"ex/a","Test":"TestOK"}`,
	`{"Action":"output","Package":"ex/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
	`{"Action":"output","Package":"ex/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}`,
	`{"Action":"pass","Package":"ex/a","Test":"TestOK"}`,
	`{"Action":"run","Package":"ex/a","Test":"TestGPU"}`,
	`{"Action":"output","Package":"ex/a","Test":"TestGPU","Output":"=== RUN   TestGPU\n"}`,
	`{"Action":"output","Package":"ex/a","Test":"TestGPU","Output":"    gpu_test.go:31: no GPU (runs on a GPU machine)\n"}`,
	`{"Action":"output","Package":"ex/a","Test":"TestGPU","Output":"--- SKIP: TestGPU (0.00s)\n"}`,
	`{"Action":"skip","Package":"ex/a","Test":"TestGPU"}`,
	`{"Action":"run","Package":"ex/a","Test":"TestQEMU/sub"}`,
	`{"Action":"output","Package":"ex/a","Test":"TestQEMU/sub","Output":"    qemu_test.go:9: ` + testdeps.Prefix + `qemu-system-x86: not found\n"}`,
	`{"Action":"output","Package":"ex/a","Test":"TestQEMU/sub","Output":"    --- SKIP: TestQEMU/sub (0.00s)\n"}`,
	`{"Action":"skip","Package":"ex/a","Test":"TestQEMU/sub"}`,
	`{"Action":"output","Package":"ex/a","Output":"PASS\n"}`,
	`{"Action":"output","Package":"ex/a","Output":"ok  \tex/a\t0.01s\n"}`,
	`{"Action":"pass","Package":"ex/a"}`,
	`{"Action":"run","Package":"ex/b","Test":"TestBad"}`,
	`{"Action":"output","Package":"ex/b","Test":"TestBad","Output":"    bad_test.go:5: got 1, want 2\n"}`,
	`{"Action":"fail","Package":"ex/b","Test":"TestBad"}`,
	`{"Action":"output","Package":"ex/b","Output":"FAIL\tex/b\t0.01s\n"}`,
	`{"Action":"fail","Package":"ex/b"}`,
	`{"ImportPath":"ex/c","Action":"build-output","Output":"c.go:3:1: syntax error\n"}`,
	`{"ImportPath":"ex/c","Action":"build-fail"}`,
	`{"Action":"output","Package":"ex/c","Output":"FAIL\tex/c [build failed]\n"}`,
	`{"Action":"fail","Package":"ex/c","FailedBuild":"ex/c"}`,
	`{"Action":"skip","Package":"ex/d"}`,
}, "\n") + "\n"

func TestFilter(t *testing.T) {
	var out bytes.Buffer
	s, err := Filter(strings.NewReader(goTestJSON), &out)
	if err != nil {
		t.Fatal(err)
	}
	want := "ok  \tex/a\t0.01s\n    bad_test.go:5: got 1, want 2\nFAIL\tex/b\t0.01s\nc.go:3:1: syntax error\nFAIL\tex/c [build failed]\n"
	if out.String() != want {
		t.Errorf("filtered output:\n%q\nwant\n%q", out.String(), want)
	}
	// TestBad (its package's failure is TestBad's) and the build of ex/c.
	if s.Passed != 1 || s.Failed != 2 {
		t.Errorf("passed %d failed %d, want 1 and 2", s.Passed, s.Failed)
	}
	wantNotRun := []Entry{
		{Skipped, "ex/a TestGPU", "no GPU (runs on a GPU machine)"},
		{Missing, "ex/a TestQEMU/sub", testdeps.Prefix + "qemu-system-x86: not found"},
	}
	if !equal(s.NotRun, wantNotRun) {
		t.Errorf("not run %+v, want %+v", s.NotRun, wantNotRun)
	}
}

func equal(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func spec(text string, state types.SpecState, msg string) types.SpecReport {
	return types.SpecReport{
		ContainerHierarchyTexts: []string{"Suite"}, LeafNodeType: types.NodeTypeIt, LeafNodeText: text,
		LeafNodeLocation: types.CodeLocation{FileName: "x_test.go", LineNumber: 7},
		State:            state, Failure: types.Failure{Message: msg},
	}
}

func ginkgoReport(t *testing.T) []byte {
	t.Helper()
	b, err := json.Marshal([]types.Report{{SpecReports: types.SpecReports{
		spec("passes", types.SpecStatePassed, ""),
		spec("fails", types.SpecStateFailed, "boom"),
		spec("needs qemu", types.SpecStateSkipped, testdeps.Prefix+"qemu-system-x86: not found"),
		spec("needs root", types.SpecStateSkipped, "requires root"),
		spec("waits", types.SpecStatePending, ""),
		spec("filtered", types.SpecStateSkipped, ""),
		{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStatePassed},
		{LeafNodeType: types.NodeTypeReportAfterSuite, State: types.SpecStateFailed},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadGinkgo(t *testing.T) {
	s, err := Read(bytes.NewReader(append([]byte("\n "), ginkgoReport(t)...)))
	if err != nil {
		t.Fatal(err)
	}
	if s.Passed != 1 || s.Failed != 2 {
		t.Errorf("passed %d failed %d, want 1 and 2 (a spec and a suite node)", s.Passed, s.Failed)
	}
	want := []Entry{
		{Missing, "e2e: Suite needs qemu", testdeps.Prefix + "qemu-system-x86: not found"},
		{Skipped, "e2e: Suite needs root", "requires root"},
		{Pending, "e2e: Suite waits", "marked Pending in x_test.go:7"},
		{NotSelected, "e2e: Suite filtered", ""},
	}
	if !equal(s.NotRun, want) {
		t.Errorf("not run %+v, want %+v", s.NotRun, want)
	}
}

func TestReadGoTest(t *testing.T) {
	s, err := Read(strings.NewReader(goTestJSON))
	if err != nil || s.Passed != 1 || len(s.NotRun) != 2 {
		t.Errorf("Read: %+v, %v", s, err)
	}
	if s, err := Read(strings.NewReader("")); err != nil || s.Passed+s.Failed+len(s.NotRun) != 0 {
		t.Errorf("empty: %+v, %v", s, err)
	}
	if _, err := Read(strings.NewReader("[{")); err == nil {
		t.Error("a broken Ginkgo report read without an error")
	}
	if _, err := Read(strings.NewReader("{\"Action\":")); err == nil {
		t.Error("a broken go test -json stream read without an error")
	}
}

func TestWrite(t *testing.T) {
	var s Summary
	s.Add(Summary{Passed: 3, NotRun: []Entry{
		{Skipped, "p TestGPU1", "no GPU"},
		{Missing, "p TestQEMU", testdeps.Prefix + "qemu-system-x86: not found"},
		{NotSelected, "e2e: x", ""},
	}})
	s.Add(Summary{Passed: 1, Failed: 1, NotRun: []Entry{{Skipped, "p TestGPU2", "no GPU"}, {Pending, "e2e: y", "marked Pending in y_test.go:1"}}})
	var b bytes.Buffer
	Write(&b, s)
	want := `
` + headings[Missing] + `:
!! p TestQEMU
       ` + testdeps.Prefix + `qemu-system-x86: not found

` + headings[Skipped] + `:
   p TestGPU1
   p TestGPU2
       no GPU

` + headings[Pending] + `:
   e2e: y
       marked Pending in y_test.go:1

1 specs ` + headings[NotSelected] + `

test summary: 4 passed, 1 failed, 5 did not run, 1 OF THEM FOR WANT OF A PACKAGE (` + testdeps.Env + `)
`
	if b.String() != want {
		t.Errorf("Write:\n%s\nwant\n%s", b.String(), want)
	}
}
