package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/gpucall"
)

// oneCall makes a call and turns a failed errno into an error.
func oneCall(ctx context.Context, r *gpucall.Runner, nr uint16, ctxID uint8, args ...uint64) (int64, error) {
	var a [abi.SysArgCount]uint64
	copy(a[:], args)
	res, err := r.Call(ctx, nr, ctxID, a)
	if err != nil {
		return 0, err
	}
	if res.Errno != 0 {
		return res.Ret, fmt.Errorf("%s: %s", abi.LookupCall(nr).Name, unix.ErrnoName(unix.Errno(res.Errno)))
	}
	return res.Ret, nil
}

func newContextCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context",
		Short: "Register guest contexts: the identity GPU system calls run with in the VM's sandbox",
		Long: `A guest context is an identity inside the VM's syscall sandbox: uid, gid,
umask, working directory and a file table of its own. Every call names its
context (0 is the VM's default: uid 0 of the sandbox, cwd /, umask 022); the
proxy serves it on a thread already switched to that context.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var f gpuFlags
	var uid, gid, umask uint32
	var cwd string
	reg := &cobra.Command{
		Use:     "register",
		Short:   "Register a context and print its id (1..255)",
		Example: `  sluice-agent context register --uid 1000 --gid 1000 --umask 077 --cwd /home`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withRunner(cmd, g, &f, func(ctx context.Context, r *gpucall.Runner) error {
				path, err := r.PutString(cwd)
				if err != nil {
					return err
				}
				id, err := oneCall(ctx, r, abi.SysContextRegister, f.context, uint64(uid), uint64(gid), uint64(umask), path)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(g.out, id)
				return err
			})
		},
	}
	f.add(reg)
	reg.Flags().Uint32Var(&uid, "uid", 0, "user id inside the sandbox")
	reg.Flags().Uint32Var(&gid, "gid", 0, "group id inside the sandbox")
	reg.Flags().Uint32Var(&umask, "umask", 0o022, "file mode creation mask")
	reg.Flags().StringVar(&cwd, "cwd", "/", "working directory inside the volume")
	var uf gpuFlags
	unreg := &cobra.Command{
		Use:   "unregister ID",
		Short: "Close a context's files and forget it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 0, 8)
			if err != nil {
				return fmt.Errorf("context id %q: %w", args[0], err)
			}
			return withRunner(cmd, g, &uf, func(ctx context.Context, r *gpucall.Runner) error {
				_, err := oneCall(ctx, r, abi.SysContextUnregister, 0, id)
				return err
			})
		},
	}
	uf.add(unreg)
	cmd.AddCommand(reg, unreg)
	return cmd
}

func newFastcallCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fastcall",
		Short: "Register and revoke fastcalls: pre-validated (curried) GPU system calls",
		Long: `A fastcall is a pread, pwrite, read or write whose file, heap buffer, length
and offset are checked once, at registration; a GPU slot that carries its
number (with the fastcall flag) runs it with no argument checks and no trip
to the proxy. Revoking a number makes later uses fail with ESTALE.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var f gpuFlags
	var op, path string
	var heapOff, length, offset uint64
	reg := &cobra.Command{
		Use:   "register --op pread|pwrite|read|write --path PATH --heap-offset OFF --length N [--offset O]",
		Short: "Open PATH in the context and register a curried call on it; print its number",
		Example: `  sluice-agent fastcall register --op pread --path /data/blob --heap-offset 1048576 --length 4096 --offset 0 \
      --heap-base 2097152`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			call := abi.CallByName(op)
			if call == nil || (call.Number != abi.SysPread64 && call.Number != abi.SysPwrite64 && call.Number != abi.SysRead && call.Number != abi.SysWrite) {
				return fmt.Errorf("--op %q: want pread, pwrite, read or write", op)
			}
			flags := uint64(unix.O_RDONLY)
			if call.Number == abi.SysPwrite64 || call.Number == abi.SysWrite {
				flags = unix.O_RDWR
			}
			return withRunner(cmd, g, &f, func(ctx context.Context, r *gpucall.Runner) error {
				p, err := r.PutString(path)
				if err != nil {
					return err
				}
				fd, err := oneCall(ctx, r, abi.SysOpenat, f.context, atFDCWD, p, flags)
				if err != nil {
					return err
				}
				num, err := oneCall(ctx, r, abi.SysFastcallRegister, f.context, uint64(call.Number), uint64(fd), heapOff, length, offset)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(g.out, num)
				return err
			})
		},
	}
	f.add(reg)
	fl := reg.Flags()
	fl.StringVar(&op, "op", "pread", "the curried call: pread, pwrite, read or write")
	fl.StringVar(&path, "path", "", "file in the volume, opened read-only (pread, read) or read-write")
	fl.Uint64Var(&heapOff, "heap-offset", 0, "heap offset of the call's buffer")
	fl.Uint64Var(&length, "length", 4096, "bytes per call")
	fl.Uint64Var(&offset, "offset", 0, "file offset (pread, pwrite)")
	var rf gpuFlags
	rev := &cobra.Command{
		Use:   "revoke NUMBER",
		Short: "Revoke a fastcall number",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.ParseUint(args[0], 0, 16)
			if err != nil {
				return fmt.Errorf("fastcall number %q: %w", args[0], err)
			}
			return withRunner(cmd, g, &rf, func(ctx context.Context, r *gpucall.Runner) error {
				_, err := oneCall(ctx, r, abi.SysFastcallRevoke, rf.context, n)
				return err
			})
		},
	}
	rf.add(rev)
	cmd.AddCommand(reg, rev)
	return cmd
}

func newWordCountCmd(g *globals) *cobra.Command {
	var f gpuFlags
	var groups, block uint32
	var chunk uint64
	cmd := &cobra.Command{
		Use:   "wordcount PATH...",
		Short: "Count the words of files in the VM's volume with a GPU program making system calls",
		Long: `Launch the GENESYS-style wordcount program: each work-group opens its files
through system calls (openat, pread64, close) served in the VM's volume and
its work-items count the words of each chunk. Paths are as the sandbox sees
the volume (its root is /).`,
		Example: `  sluice-agent run wordcount /in/a.txt /in/b.txt --json`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withRunner(cmd, g, &f, func(ctx context.Context, r *gpucall.Runner) error {
				words, bytes, errno, err := r.WordCount(ctx, args, groups, block, chunk, f.context)
				if err != nil {
					return err
				}
				res := struct {
					Files int       `json:"files"`
					Words uint64    `json:"words"`
					Bytes uint64    `json:"bytes"`
					Errno abi.Errno `json:"errno"`
				}{len(args), words, bytes, errno}
				if f.asJSON {
					return writeJSON(g.out, res)
				}
				_, err = fmt.Fprintf(g.out, "%d words in %d bytes of %d files (first errno %d)\n", words, bytes, len(args), errno)
				return err
			})
		},
	}
	f.add(cmd)
	cmd.Flags().Uint32Var(&groups, "groups", 4, "work-groups (each takes every groups-th file)")
	cmd.Flags().Uint32Var(&block, "block", 64, "work-items per group")
	cmd.Flags().Uint64Var(&chunk, "chunk", 64<<10, "bytes per pread")
	return cmd
}

// atFDCWD is AT_FDCWD (-100) as a slot argument.
var atFDCWD = func() uint64 { v := int64(unix.AT_FDCWD); return uint64(v) }()
