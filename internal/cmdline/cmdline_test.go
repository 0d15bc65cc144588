package cmdline

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// newTest is a root with a duration flag and a renamed one; ran reports
// what its action saw.
func newTest(ran *time.Duration, fail error) *cobra.Command {
	root := NewRoot(&cobra.Command{Use: "tool", Short: "a test tool",
		RunE: func(cmd *cobra.Command, _ []string) error {
			*ran, _ = cmd.Flags().GetDuration("poll")
			return fail
		}}, "v1.2")
	root.Flags().Duration("poll", time.Millisecond, "poll phase length")
	Renamed(root.Flags(), "poll-ns", "poll", "a duration such as 50us")
	return root
}

func TestExecute(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		fail       error
		code       int
		poll       time.Duration
		out, inErr string
	}{
		{name: "version", args: []string{"--version"}, out: "tool v1.2\n"},
		{name: "help", args: []string{"--help"}, out: "--poll duration"},
		{name: "help hides the old name", args: []string{"--help"}, out: "poll phase length"},
		{name: "default", poll: time.Millisecond},
		{name: "duration", args: []string{"--poll", "50us"}, poll: 50 * time.Microsecond},
		{name: "bad duration", args: []string{"--poll", "50"}, code: ExitUsage, inErr: `invalid argument "50" for "--poll" flag`},
		{name: "renamed", args: []string{"--poll-ns", "50000"}, code: ExitUsage, inErr: "replaced by --poll (a duration such as 50us)"},
		{name: "unknown flag", args: []string{"--nope"}, code: ExitUsage, inErr: "Run 'tool --help' for usage."},
		{name: "argument", args: []string{"extra"}, code: ExitUsage, inErr: `unknown command "extra"`},
		{name: "failure", fail: errors.New("it broke"), code: ExitError, poll: time.Millisecond, inErr: "tool: it broke\n"},
		{name: "usage failure", fail: Usagef("--x needs --y"), code: ExitUsage, poll: time.Millisecond, inErr: "tool: --x needs --y\nRun 'tool --help'"},
		{name: "exit code", fail: ExitCode(3), code: 3, poll: time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var poll time.Duration
			var out, errb bytes.Buffer
			code := Execute(context.Background(), newTest(&poll, tc.fail), tc.args, &out, &errb)
			if code != tc.code || poll != tc.poll {
				t.Errorf("exit %d, poll %v; want %d, %v (stderr %q)", code, poll, tc.code, tc.poll, errb.String())
			}
			if !strings.Contains(out.String(), tc.out) || !strings.Contains(errb.String(), tc.inErr) {
				t.Errorf("stdout %q, stderr %q; want %q, %q", out.String(), errb.String(), tc.out, tc.inErr)
			}
			if tc.name == "help hides the old name" && strings.Contains(out.String(), "poll-ns") {
				t.Errorf("--help shows the renamed flag:\n%s", out.String())
			}
			if tc.name == "exit code" && errb.Len() != 0 {
				t.Errorf("ExitCode printed %q", errb.String())
			}
		})
	}
}

func TestEnv(t *testing.T) {
	get := func(k string) string { return map[string]string{"SET": "x", "EMPTY": ""}[k] }
	for _, tc := range []struct {
		key, want string
		getenv    func(string) string
	}{{"SET", "x", get}, {"EMPTY", "def", get}, {"UNSET", "def", get}, {"SET", "def", nil}} {
		if got := Env(tc.getenv, tc.key, "def"); got != tc.want {
			t.Errorf("Env(%s) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

func TestAlias(t *testing.T) {
	var stderr, stdout bytes.Buffer
	var domain bool
	var poll time.Duration
	root := NewRoot(&cobra.Command{Use: "tool", RunE: func(cmd *cobra.Command, _ []string) error {
		_, err := cmd.OutOrStdout().Write([]byte("<domain/>"))
		return err
	}}, "v1")
	root.Flags().BoolVar(&domain, "domain", false, "print a domain")
	root.Flags().DurationVar(&poll, "poll", 0, "poll phase")
	Alias(root.Flags(), "whole", "domain", &stderr)
	Alias(root.Flags(), "every", "poll", &stderr)
	if code := Execute(context.Background(), root, []string{"--whole", "--every", "5ms"}, &stdout, &stderr); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !domain || poll != 5*time.Millisecond || stdout.String() != "<domain/>" ||
		stderr.String() != "warning: --whole is deprecated: use --domain\nwarning: --every is deprecated: use --poll\n" {
		t.Errorf("domain %v, poll %v, stdout %q, stderr %q", domain, poll, stdout.String(), stderr.String())
	}
	stdout.Reset()
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil || strings.Contains(stdout.String(), "whole") {
		t.Errorf("--help shows the alias (%v):\n%s", err, stdout.String())
	}
}
