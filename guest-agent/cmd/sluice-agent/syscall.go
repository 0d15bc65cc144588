package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/gpucall"
)

// gpuFlags are the flags of every command that runs a GPU program.
type gpuFlags struct {
	backend  string
	channel  int
	context  uint8
	asJSON   bool
	heapBase uint64
}

func (f *gpuFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.backend, "backend", gpucall.BackendSim, "the daemon's GPU backend, which decides the program's form: sim (built-in programs) or cuda (PTX)")
	fl.IntVar(&f.channel, "channel", 0, "channel the program runs on")
	fl.Uint8Var(&f.context, "context", 0, "guest context the calls run in (0: the VM's default; see context register)")
	fl.BoolVar(&f.asJSON, "json", false, "print the result as JSON")
	fl.Uint64Var(&f.heapBase, "heap-base", 0, "first heap byte the command may use for its arguments and the programs' results")
}

// withRunner opens the region, loads the programs and hands run a Runner.
func withRunner(cmd *cobra.Command, g *globals, f *gpuFlags, run func(context.Context, *gpucall.Runner) error) error {
	d, finish, err := g.open(cmd)
	if err != nil {
		return err
	}
	r, err := gpucall.NewRunner(cmd.Context(), d, gpucall.Options{Backend: f.backend, Channel: f.channel, HeapBase: f.heapBase})
	if err != nil {
		return finish(err)
	}
	return finish(run(cmd.Context(), r))
}

func newSyscallCmd(g *globals) *cobra.Command {
	var f gpuFlags
	cmd := &cobra.Command{
		Use:   "syscall NAME [ARG...]",
		Short: "Make one system call from a GPU work-item and print its result",
		Long: `Launch a one-work-item GPU program that makes system call NAME through the
VM's syscall slots, exactly as any GPU program does: the mediator copies and
checks the slot, the VM's sandboxed proxy serves it in the volume, the result
comes back to the GPU thread, which writes it where this command reads it.

Arguments follow the call's Linux order. Integers are decimal or 0x-hex
(AT_FDCWD and O_* names joined by | are accepted); a path is a string the
command places in the heap, NUL-terminated; a buffer the call reads (write,
pwrite, sendto) is a string placed in the heap, and one the call fills (read,
pread, recvfrom, getdents64) is @N for N bytes; structures the call writes
(fstat, clock_gettime, getrusage) are placed by the command and may be left
out. Missing trailing arguments are 0.

Prints {"ret": N, "errno": E} with --json (errno 0 on success). The exit
status is 0 whenever the call was made, whatever its errno.`,
		Example: `  sluice-agent run syscall null --json
  sluice-agent run syscall openat AT_FDCWD /in/a.txt O_RDONLY --json
  sluice-agent run syscall pread64 3 @4096 4096 0
  sluice-agent run syscall mkdirat AT_FDCWD /out 0755`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			call := abi.CallByName(args[0])
			if call == nil {
				return fmt.Errorf("unknown call %q: want one of %s", args[0], callNames())
			}
			return withRunner(cmd, g, &f, func(ctx context.Context, r *gpucall.Runner) error {
				vals, err := callArgs(r, call, args[1:])
				if err != nil {
					return err
				}
				res, err := r.Call(ctx, call.Number, f.context, vals)
				if err != nil {
					return err
				}
				return printResult(g.out, f.asJSON, call.Name, res)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func printResult(w io.Writer, asJSON bool, name string, res gpucall.Result) error {
	if asJSON {
		return writeJSON(w, res)
	}
	if res.Errno != 0 {
		_, err := fmt.Fprintf(w, "%s = %d (%s: %v)\n", name, res.Ret, res.Errno.Name(), syscall.Errno(res.Errno))
		return err
	}
	_, err := fmt.Fprintf(w, "%s = %d\n", name, res.Ret)
	return err
}

func callNames() string {
	names := make([]string, len(abi.Calls))
	for i, c := range abi.Calls {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// callArgs turns command-line arguments into slot arguments, placing paths
// and buffers in the heap.
func callArgs(r *gpucall.Runner, call *abi.Call, args []string) ([abi.SysArgCount]uint64, error) {
	var out [abi.SysArgCount]uint64
	if len(args) > abi.SysArgCount {
		return out, fmt.Errorf("%s takes at most %d arguments", call.Name, abi.SysArgCount)
	}
	for i, kind := range call.Args {
		var a string
		if i < len(args) {
			a = args[i]
		}
		v, err := callArg(r, kind, a)
		if err != nil {
			return out, fmt.Errorf("%s argument %d %q: %w", call.Name, i+1, a, err)
		}
		out[i] = v
	}
	return out, nil
}

func callArg(r *gpucall.Runner, kind abi.ArgKind, a string) (uint64, error) {
	switch kind {
	case abi.ArgPath:
		return r.PutString(a)
	case abi.ArgHeapOut:
		if a == "" || a == "-" {
			return r.Alloc(256)
		}
	case abi.ArgBuf:
		if n, ok := strings.CutPrefix(a, "@"); ok {
			size, err := strconv.ParseUint(n, 0, 32)
			if err != nil {
				return 0, fmt.Errorf("want @BYTES: %w", err)
			}
			return r.Alloc(size)
		}
		if a != "" {
			off, err := r.PutString(a)
			return off, err
		}
	}
	if a == "" {
		return 0, nil
	}
	return parseIntArg(a)
}

var intNames = map[string]int64{
	"AT_FDCWD": unix.AT_FDCWD, "O_RDONLY": unix.O_RDONLY, "O_WRONLY": unix.O_WRONLY, "O_RDWR": unix.O_RDWR,
	"O_CREAT": unix.O_CREAT, "O_TRUNC": unix.O_TRUNC, "O_APPEND": unix.O_APPEND, "O_EXCL": unix.O_EXCL,
	"O_DIRECTORY": unix.O_DIRECTORY, "O_NOFOLLOW": unix.O_NOFOLLOW, "AT_REMOVEDIR": unix.AT_REMOVEDIR,
	"AF_INET": unix.AF_INET, "AF_UNIX": unix.AF_UNIX, "SOCK_STREAM": unix.SOCK_STREAM, "SOCK_DGRAM": unix.SOCK_DGRAM,
}

// parseIntArg reads an integer, or names joined by '|'.
func parseIntArg(a string) (uint64, error) {
	var v int64
	for _, part := range strings.Split(a, "|") {
		if n, ok := intNames[part]; ok {
			v |= n
			continue
		}
		n, err := strconv.ParseInt(part, 0, 64)
		if err != nil {
			u, uerr := strconv.ParseUint(part, 0, 64)
			if uerr != nil {
				return 0, fmt.Errorf("not an integer or a known name: %w", err)
			}
			n = int64(u)
		}
		v |= n
	}
	return uint64(v), nil
}
