package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// maxFSRead bounds fs read: its output travels back in one control-port
// line (control.MaxLine), JSON-escaped.
const maxFSRead = 256 << 10

// newFSCmd lets the host put files into the guest and read them back
// through the control port, e.g. into the VM's volume (/volume), which its
// GPU system calls see too. Deliberately tiny: write and read, no more.
func newFSCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fs",
		Short: "Write and read files in the guest (e.g. in the VM's volume, /volume)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "write PATH TEXT",
		Short:   "Write TEXT to PATH (created or truncated, mode 0644, parent directories created)",
		Example: `  sluice-agent fs write /volume/in/a.txt "the quick brown fox"`,
		Args:    cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			path := args[0]
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.WriteString(f, args[1])
			// fsync: on the volume the host side reads the file next.
			err = errors.Join(err, f.Sync(), f.Close())
			if err != nil {
				return fmt.Errorf("writing %s: %w", path, err)
			}
			return nil
		},
	}, &cobra.Command{
		Use:   "read PATH",
		Short: fmt.Sprintf("Print the contents of PATH (at most %d KiB)", maxFSRead>>10),
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			b, err := io.ReadAll(io.LimitReader(f, maxFSRead+1))
			if err != nil {
				return fmt.Errorf("reading %s: %w", args[0], err)
			}
			if len(b) > maxFSRead {
				return fmt.Errorf("reading %s: longer than %d KiB", args[0], maxFSRead>>10)
			}
			_, err = g.out.Write(b)
			return err
		},
	})
	return cmd
}
