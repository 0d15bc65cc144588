package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// policies are the scheduling policies, in the order help and errors list
// them.
var policies = []string{hostapi.PolicyNone, hostapi.PolicyDFQ, hostapi.PolicyCap, hostapi.PolicyTimeslice}

func newPolicyCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Show or switch the GPU's scheduling policy",
		Long: `Show or switch how sluiced schedules the GPU among VMs:

  none       accounting only: VMs are charged but never held back
  dfq        disengaged fair queuing (the default): each VM gets GPU time in
             proportion to its weight when VMs compete; an idle VM's share
             goes to the others
  cap        hard maximum shares: a VM with a cap (sluicectl vm set --cap)
             gets no more than it in the long run, even if the GPU would
             otherwise idle; VMs without a cap are not held back
  timeslice  engaged round robin: one VM per period, for as many periods in
             a row as its weight; a baseline to compare with

The accounting method (how the scheduler learns each VM's GPU time) is shown
too; it is chosen when sluiced starts (sluiced --accounting) and cannot be
switched here. Under accounting off only policy none is taken. Billing comes
from completions under every method.`,
		Example: `  sluicectl policy get
  sluicectl policy set cap
  sluicectl policy get --json | jq -r .accounting`,
		Args: groupArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(newPolicyGetCommand(a), newPolicySetCommand(a))
	return cmd
}

func newPolicyGetCommand(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get",
		Short: "Show the scheduling policy and the accounting method",
		Long: `Show the scheduling policy in effect and the accounting method sluiced was
started with. --json prints the daemon's policy object.`,
		Example: `  sluicectl policy get
  sluicectl policy get --json`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.client().Policy(cmd.Context())
			if err != nil {
				return fmt.Errorf("asking sluiced for its policy: %w", err)
			}
			return writePolicy(cmd.OutOrStdout(), p, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the policy object as JSON")
	return cmd
}

func newPolicySetCommand(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "set " + strings.Join(policies, "|"),
		Short: "Switch the scheduling policy while VMs run",
		Long: `Switch the GPU's scheduling policy to one of ` + strings.Join(policies, ", ") + `
(see "sluicectl policy --help"), then print the policy in effect. The switch
applies from the scheduler's next period and is kept when sluiced restarts.`,
		Example: `  sluicectl policy set dfq
  sluicectl policy set cap --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := argsNamed("POLICY")(cmd, args); err != nil {
				return err
			}
			if !slices.Contains(policies, args[0]) {
				return usageErrorf("unknown policy %q (want one of: %s)", args[0], strings.Join(policies, ", "))
			}
			return nil
		},
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, p := range policies {
				out = append(out, cobra.CompletionWithDesc(p, policyDescriptions[p]))
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.client().SetPolicy(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("setting policy %s: %w", args[0], err)
			}
			return writePolicy(cmd.OutOrStdout(), p, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the policy in effect as JSON")
	return cmd
}

func writePolicy(w io.Writer, p hostapi.PolicyState, asJSON bool) error {
	if asJSON {
		return writeJSON(w, p)
	}
	_, err := io.WriteString(w, RenderPolicy(p))
	return err
}
