// Package cmdline holds what the command lines of every Sluice binary
// share, so that they look and fail alike: a cobra root whose --version
// prints "NAME VERSION", usage errors that exit 2 with a --help hint,
// defaults taken from SLUICE_* environment variables (flags win), and
// flags that were renamed failing with the name that replaced them.
package cmdline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes every Sluice binary uses.
const (
	ExitOK    = 0 // success
	ExitError = 1 // the command failed; a message is on stderr
	ExitUsage = 2 // bad command line; a message and a hint are on stderr
)

// UsageError marks a bad command line: exit 2 and a --help hint.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef is a UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// ExitCode ends Execute with this status and no message: the command has
// said (or logged) why already.
type ExitCode int

func (c ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// NewRoot dresses root as a Sluice binary's root command: --version (no
// shorthand) printing "NAME VERSION", no usage dump or double message on
// errors, flag and argument errors as usage errors, no completion command,
// and no positional arguments unless root.Args says otherwise.
func NewRoot(root *cobra.Command, version string) *cobra.Command {
	root.Version = version
	root.Flags().Bool("version", false, "print the version and exit")
	root.SetVersionTemplate(root.Name() + " {{.Version}}\n")
	root.SilenceErrors, root.SilenceUsage = true, true
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return UsageError{err} })
	args := root.Args
	if args == nil {
		args = cobra.NoArgs
	}
	root.Args = func(cmd *cobra.Command, a []string) error {
		if err := args(cmd, a); err != nil {
			return UsageError{err}
		}
		return nil
	}
	return root
}

// Execute runs root with args (without the program name) and returns the
// exit status: 0, the status of an ExitCode, 2 after a usage error (the
// message and a hint on stderr) or 1 after any other (its message).
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var code ExitCode
	if errors.As(err, &code) {
		return int(code)
	}
	fmt.Fprintf(stderr, "%s: %v\n", root.Name(), err)
	var ue UsageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return ExitUsage
	}
	return ExitError
}

// isCobraUsage recognises the one usage error cobra returns without the
// flag error function: an unknown subcommand.
func isCobraUsage(err error) bool { return strings.HasPrefix(err.Error(), "unknown command ") }

// Env is the value of the environment variable key, or def when it is
// unset or empty. getenv nil: no environment.
func Env(getenv func(string) string, key, def string) string {
	if getenv != nil {
		if v := getenv(key); v != "" {
			return v
		}
	}
	return def
}

// Renamed registers old as a hidden flag that refuses any use, naming the
// flag that replaced it (hint: how the new one is given, e.g. "a duration
// such as 100us"). Used where a clean break is better than an alias: the
// old spelling fails loudly instead of meaning something else.
func Renamed(fs *pflag.FlagSet, old, replacement, hint string) {
	fs.Var(renamed{replacement, hint}, old, "replaced by --"+replacement)
	_ = fs.MarkHidden(old)
}

type renamed struct{ replacement, hint string }

func (r renamed) String() string { return "" }
func (r renamed) Type() string   { return "string" }
func (r renamed) Set(string) error {
	return fmt.Errorf("this flag was replaced by --%s (%s)", r.replacement, r.hint)
}

// Checked is a RunE that checks the flags first (a failure is a usage
// error), then acts.
func Checked(check func(*pflag.FlagSet) error, act func(context.Context) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := check(cmd.Flags()); err != nil {
			return UsageError{err}
		}
		return act(cmd.Context())
	}
}

// Alias registers old as a hidden spelling of the flag named replacement
// (declared first) that still works, saying on w, once per use, that it
// is deprecated. Unlike cobra's MarkDeprecated, whose notice goes to the
// command's output, it keeps stdout clean for what the command prints.
func Alias(fs *pflag.FlagSet, old, replacement string, w io.Writer) {
	target := fs.Lookup(replacement)
	fs.Var(alias{target, old, w}, old, "the old name of --"+replacement)
	f := fs.Lookup(old)
	f.Hidden, f.NoOptDefVal = true, target.NoOptDefVal
}

type alias struct {
	target *pflag.Flag
	old    string
	w      io.Writer
}

func (a alias) String() string { return a.target.Value.String() }
func (a alias) Type() string   { return a.target.Value.Type() }
func (a alias) Set(s string) error {
	fmt.Fprintf(a.w, "warning: --%s is deprecated: use --%s\n", a.old, a.target.Name)
	return a.target.Value.Set(s)
}
