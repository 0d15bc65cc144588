// Command testsummary sums up test runs for make test: `filter` turns a
// `go test -json` stream (stdin) into what `go test` shows without -v and
// the tests that did not run; `report FILE...` reads saved streams and
// Ginkgo JSON reports and prints every test that did not run, with why,
// and the counts. Either exits 1 when a test failed.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/internal/testsummary"
)

// errFailed is a run with failed tests: already shown, only the exit
// status is left to give.
var errFailed = errors.New("tests failed")

func main() {
	root := &cobra.Command{
		Use:           "testsummary",
		Short:         "Sum up go test -json streams and Ginkgo JSON reports: what failed, what did not run and why",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(&cobra.Command{
		Use:   "filter",
		Short: "Read go test -json on stdin; print package results, failed tests' output and the tests that did not run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := testsummary.Filter(cmd.InOrStdin(), cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return write(cmd, s)
		},
	}, &cobra.Command{
		Use:   "report FILE...",
		Short: "Print the tests that did not run in saved go test -json streams and Ginkgo JSON reports, and the counts",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			var all testsummary.Summary
			for _, name := range files {
				s, err := readFile(name)
				if err != nil {
					return err
				}
				all.Add(s)
			}
			return write(cmd, all)
		},
	})
	if err := root.Execute(); err != nil {
		if !errors.Is(err, errFailed) {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
		}
		os.Exit(1)
	}
}

func readFile(name string) (testsummary.Summary, error) {
	f, err := os.Open(name)
	if err != nil {
		return testsummary.Summary{}, fmt.Errorf("opening a test report: %w", err)
	}
	defer f.Close()
	s, err := testsummary.Read(f)
	if err != nil {
		return s, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

func write(cmd *cobra.Command, s testsummary.Summary) error {
	testsummary.Write(cmd.OutOrStdout(), s)
	if s.Failed > 0 {
		return errFailed
	}
	return nil
}
