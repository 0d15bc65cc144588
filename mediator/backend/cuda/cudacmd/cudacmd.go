// Package cudacmd gives a binary that links the cuda backend the hidden
// subcommands the backend starts it again with: "cuda-worker" (a VM's GPU
// worker) and "cuda-native" (the native baseline's runner). A process
// becomes one of them only when its command line says so, never through
// its environment.
package cudacmd

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/mediator/backend/cuda"
)

// Commands are the hidden subcommands; add them to the binary's root.
func Commands() []*cobra.Command {
	return commands(map[string]func() int{cuda.WorkerCommand: cuda.WorkerMain, cuda.NativeCommand: cuda.NativeMain}, os.Exit)
}

// commands makes a hidden subcommand per role, which ends the process
// with the role's exit status. They parse no flags (the role reads its
// descriptors or stdin) and skip the root's persistent hooks, which set up
// what a role does not use (a client's connection, a daemon's logging).
func commands(roles map[string]func() int, exit func(int)) []*cobra.Command {
	var cmds []*cobra.Command
	for _, name := range []string{cuda.WorkerCommand, cuda.NativeCommand} {
		main := roles[name]
		cmds = append(cmds, &cobra.Command{
			Use:                name,
			Short:              "internal: a process the cuda backend starts (" + name + ")",
			Hidden:             true,
			DisableFlagParsing: true,
			PersistentPreRun:   func(*cobra.Command, []string) {},
			Run:                func(*cobra.Command, []string) { exit(main()) },
		})
	}
	return cmds
}
