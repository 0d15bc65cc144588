// Package testsummary reads what test runs report, `go test -json` event
// streams and Ginkgo JSON reports, and sums up the tests that did not run:
// those skipped for something the machine lacks (allowed only under
// SLUICE_ALLOW_MISSING: internal/testdeps's prefix), those skipped for
// another reason (each with its message, which says what would run it), the
// pending specs and the specs a label filter left out. make test prints the
// summary last, so that no skip passes unseen.
package testsummary

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/sluice-gpu/sluice/internal/testdeps"
)

// Kind is why a test did not run.
type Kind int

// The kinds, in the order the summary lists them.
const (
	Missing     Kind = iota // skipped for want of a package, under SLUICE_ALLOW_MISSING
	Skipped                 // skipped for another reason, said in its message
	Pending                 // a Ginkgo spec marked Pending
	NotSelected             // a Ginkgo spec a label or focus filter left out
)

// Entry is one test that did not run.
type Entry struct {
	Kind    Kind
	Name    string // package and test, or the spec's full text
	Message string // why, one or more lines
}

// Summary is what one or more runs did; tests and subtests count alike.
type Summary struct {
	Passed, Failed int
	NotRun         []Entry
}

// Add appends other's counts and entries to s.
func (s *Summary) Add(other Summary) {
	s.Passed += other.Passed
	s.Failed += other.Failed
	s.NotRun = append(s.NotRun, other.NotRun...)
}

func kindOf(msg string) Kind {
	if strings.HasPrefix(msg, testdeps.Prefix) {
		return Missing
	}
	return Skipped
}

// Read reads a `go test -json` stream or a Ginkgo JSON report (an array),
// telling them apart by their first byte.
func Read(r io.Reader) (Summary, error) {
	br := bufio.NewReader(r)
	for {
		b, err := br.Peek(1)
		if err != nil {
			if err == io.EOF {
				return Summary{}, nil
			}
			return Summary{}, fmt.Errorf("reading a test report: %w", err)
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			_, _ = br.ReadByte()
		case '[':
			return ReadGinkgo(br)
		default:
			return Filter(br, io.Discard)
		}
	}
}

// ReadGinkgo reads a Ginkgo JSON report (-ginkgo.json-report).
func ReadGinkgo(r io.Reader) (Summary, error) {
	var reports []types.Report
	if err := json.NewDecoder(r).Decode(&reports); err != nil {
		return Summary{}, fmt.Errorf("decoding a Ginkgo report: %w", err)
	}
	var s Summary
	for _, rep := range reports {
		for _, spec := range rep.SpecReports {
			if spec.LeafNodeType != types.NodeTypeIt {
				if spec.State.Is(types.SpecStateFailureStates) {
					s.Failed++ // a suite-level node failed
				}
				continue
			}
			name := "e2e: " + spec.FullText()
			switch {
			case spec.State == types.SpecStatePassed:
				s.Passed++
			case spec.State == types.SpecStatePending:
				s.NotRun = append(s.NotRun, Entry{Pending, name, "marked Pending in " + spec.LeafNodeLocation.String()})
			case spec.State == types.SpecStateSkipped && spec.Failure.Message == "":
				s.NotRun = append(s.NotRun, Entry{NotSelected, name, ""})
			case spec.State == types.SpecStateSkipped:
				msg := strings.TrimSpace(spec.Failure.Message)
				s.NotRun = append(s.NotRun, Entry{kindOf(msg), name, msg})
			default:
				s.Failed++
			}
		}
	}
	return s, nil
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string // build-output, build-fail
	FailedBuild string // a package's fail for its build-fail
}

// location is the file:line t.Skip writes before its message.
var location = regexp.MustCompile(`^\S+\.go:\d+: `)

// Filter reads a `go test -json` stream and writes to w what `go test`
// without -v would have shown: each package's result line, build errors and
// the output of every test that failed. It sums up the run.
func Filter(r io.Reader, w io.Writer) (Summary, error) {
	var s Summary
	output := map[[2]string][]string{} // a running test's output lines
	failedIn := map[string]bool{}      // packages with a failed test
	dec := json.NewDecoder(r)
	for {
		var e event
		if err := dec.Decode(&e); err == io.EOF {
			return s, nil
		} else if err != nil {
			return s, fmt.Errorf("decoding go test -json output: %w", err)
		}
		key := [2]string{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Action == "build-fail":
			s.Failed++
		case e.Test == "":
			if e.Action == "output" && e.Output != "PASS\n" {
				fmt.Fprint(w, e.Output)
			}
			if e.Action == "fail" && !failedIn[e.Package] && e.FailedBuild == "" {
				s.Failed++ // a package that failed outside its tests (a panic, a timeout, TestMain, setup)
			}
		case e.Action == "output":
			output[key] = append(output[key], e.Output)
		case e.Action == "pass":
			s.Passed++
			delete(output, key)
		case e.Action == "fail":
			s.Failed++
			failedIn[e.Package] = true
			fmt.Fprint(w, strings.Join(output[key], ""))
			delete(output, key)
		case e.Action == "skip":
			msg := skipMessage(output[key])
			s.NotRun = append(s.NotRun, Entry{kindOf(msg), e.Package + " " + e.Test, msg})
			delete(output, key)
		}
	}
}

// skipMessage is what a skipped test wrote, without go test's own lines
// and the location of the t.Skip.
func skipMessage(lines []string) string {
	var msg []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		msg = append(msg, location.ReplaceAllString(l, ""))
	}
	return strings.Join(msg, "\n")
}

// headings introduce each kind in Write.
var headings = [...]string{
	Missing:     "SKIPPED: MISSING ON THIS MACHINE, allowed only by " + testdeps.Env + " (install it: deploy/test-deps.sh as root)",
	Skipped:     "skipped (each says why, and what would run it where it can run)",
	Pending:     "pending (marked Pending in the source: known not to pass yet)",
	NotSelected: "not selected (left out by a label or focus filter)",
}

// Write prints s: the tests that did not run, grouped by kind and, under
// each kind, by message (the GPU tests all say the same), then the counts.
func Write(w io.Writer, s Summary) {
	var b bytes.Buffer
	for k := range headings {
		if Kind(k) != NotSelected {
			writeKind(&b, Kind(k), s.NotRun)
		}
	}
	if n := s.count(NotSelected); n > 0 {
		fmt.Fprintf(&b, "\n%d specs %s\n", n, headings[NotSelected])
	}
	fmt.Fprintf(&b, "\ntest summary: %d passed, %d failed, %d did not run", s.Passed, s.Failed, len(s.NotRun))
	if n := s.count(Missing); n > 0 {
		fmt.Fprintf(&b, ", %d OF THEM FOR WANT OF A PACKAGE (%s)", n, testdeps.Env)
	}
	b.WriteString("\n")
	_, _ = w.Write(b.Bytes())
}

// writeKind lists the entries of kind k, those with one message together.
func writeKind(b *bytes.Buffer, k Kind, entries []Entry) {
	var msgs []string
	names := map[string][]string{}
	for _, e := range entries {
		if e.Kind != k {
			continue
		}
		if _, ok := names[e.Message]; !ok {
			msgs = append(msgs, e.Message)
		}
		names[e.Message] = append(names[e.Message], e.Name)
	}
	if len(msgs) == 0 {
		return
	}
	mark := "  "
	if k == Missing {
		mark = "!!"
	}
	fmt.Fprintf(b, "\n%s:\n", headings[k])
	for _, m := range msgs {
		for _, name := range names[m] {
			fmt.Fprintf(b, "%s %s\n", mark, name)
		}
		for _, l := range strings.Split(m, "\n") {
			if l != "" {
				fmt.Fprintf(b, "       %s\n", l)
			}
		}
	}
}

func (s Summary) count(k Kind) int {
	var n int
	for _, e := range s.NotRun {
		if e.Kind == k {
			n++
		}
	}
	return n
}
