package cudacmd

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/mediator/backend/cuda"
)

func TestRolesDispatched(t *testing.T) {
	for _, tc := range []struct {
		args []string
		role string
		code int
	}{
		{[]string{cuda.WorkerCommand}, "worker", 3},
		{[]string{cuda.NativeCommand}, "native", 1},
		{[]string{cuda.WorkerCommand, "--no-such-flag"}, "worker", 3},
		{[]string{"serve"}, "", -1},
	} {
		var ran string
		code := -1
		roles := map[string]func() int{
			cuda.WorkerCommand: func() int { ran += "worker"; return 3 },
			cuda.NativeCommand: func() int { ran += "native"; return 1 },
		}
		root := &cobra.Command{Use: "bin", SilenceErrors: true, SilenceUsage: true,
			// What a client or daemon sets up: a role must not depend on it.
			PersistentPreRunE: func(*cobra.Command, []string) error { return errors.New("root hook ran") }}
		root.AddCommand(commands(roles, func(c int) { code = c })...)
		root.AddCommand(&cobra.Command{Use: "serve", Run: func(*cobra.Command, []string) {}})
		root.SetArgs(tc.args)
		err := root.Execute()
		if tc.role == "" {
			if ran != "" || err == nil {
				t.Errorf("%q: ran %q, err %v; want no role and the root hook", tc.args, ran, err)
			}
			continue
		}
		if err != nil || ran != tc.role || code != tc.code {
			t.Errorf("%q: ran %q, exit %d, err %v; want %s, %d", tc.args, ran, code, err, tc.role, tc.code)
		}
	}
}

func TestHiddenFromHelp(t *testing.T) {
	root := &cobra.Command{Use: "bin", Run: func(*cobra.Command, []string) {}}
	root.AddCommand(Commands()...)
	root.AddCommand(&cobra.Command{Use: "serve", Run: func(*cobra.Command, []string) {}})
	var out strings.Builder
	root.SetOut(&out)
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "serve") || strings.Contains(out.String(), "cuda-") {
		t.Errorf("--help shows the roles, or not the others:\n%s", out.String())
	}
}
