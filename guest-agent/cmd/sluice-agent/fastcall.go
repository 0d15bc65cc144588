package main

import (
	"context"
	"encoding/binary"
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
		return res.Ret, fmt.Errorf("%s: %s", abi.LookupCall(nr).Name, res.Errno.Name())
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

func newSweepCmd(g *globals) *cobra.Command {
	var f gpuFlags
	var path, gran, order string
	var grid, block uint32
	var chunk uint64
	cmd := &cobra.Command{
		Use:   "sweep --path PATH [--granularity work-item|work-group|kernel] [--ordering strong|relaxed]",
		Short: "Read a volume file with a GPU program whose callers pread it chunk by chunk",
		Long: `Open PATH (a system call), then launch the pread sweep program: its callers
(every work-item, one per work-group, or one for the kernel) pread the file's
chunks in turn into their buffers and sum the bytes; print the bytes read,
the failed calls and the sum, which a host can check against the file.`,
		Example: `  sluice-agent run sweep --path /data/blob --granularity work-group --grid 8 --block 64 --json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			gv, ok := map[string]uint8{"work-item": abi.ProgWorkItem, "work-group": abi.ProgWorkGroup, "kernel": abi.ProgKernel}[gran]
			if !ok {
				return fmt.Errorf("--granularity %q: want work-item, work-group or kernel", gran)
			}
			ov, ok := map[string]uint8{"strong": abi.ProgStrong, "relaxed": abi.ProgRelaxed}[order]
			if !ok {
				return fmt.Errorf("--ordering %q: want strong or relaxed", order)
			}
			return withRunner(cmd, g, &f, func(ctx context.Context, r *gpucall.Runner) error {
				p, err := r.PutString(path)
				if err != nil {
					return err
				}
				fd, err := oneCall(ctx, r, abi.SysOpenat, f.context, atFDCWD, p, unix.O_RDONLY)
				if err != nil {
					return err
				}
				st, err := r.Alloc(256)
				if err != nil {
					return err
				}
				if _, err := oneCall(ctx, r, abi.SysFstat, f.context, uint64(fd), st); err != nil {
					return err
				}
				statBuf, err := r.Read(st, 256)
				if err != nil {
					return err
				}
				size := binary.LittleEndian.Uint64(statBuf[statSizeOff:])
				bytes, failed, sum, err := r.Sweep(ctx, uint32(fd), size, chunk, grid, block, gv, ov, f.context)
				_, _ = oneCall(ctx, r, abi.SysClose, f.context, uint64(fd))
				if err != nil {
					return err
				}
				res := struct {
					Size   uint64 `json:"size"`
					Bytes  uint64 `json:"bytes"`
					Failed uint64 `json:"failed"`
					Sum    uint64 `json:"sum"`
				}{size, bytes, failed, sum}
				if f.asJSON {
					return writeJSON(g.out, res)
				}
				_, err = fmt.Fprintf(g.out, "read %d of %d bytes, %d failed calls, byte sum %d\n", bytes, size, failed, sum)
				return err
			})
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&path, "path", "", "file in the volume")
	fl.StringVar(&gran, "granularity", "work-item", "which work-items call: work-item, work-group or kernel")
	fl.StringVar(&order, "ordering", "strong", "strong (barriers around a work-group's call) or relaxed")
	fl.Uint32Var(&grid, "grid", 4, "work-groups")
	fl.Uint32Var(&block, "block", 32, "work-items per group")
	fl.Uint64Var(&chunk, "chunk", 4096, "bytes per pread")
	return cmd
}

// statSizeOff is st_size's offset in Linux x86-64's struct stat, which fstat
// writes.
const statSizeOff = 48
