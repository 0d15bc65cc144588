package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/api/controllerapi"
)

// printOr writes v as JSON with --json, else the table.
func printOr(cmd *cobra.Command, asJSON bool, v any, table func() string) error {
	if asJSON {
		return writeJSON(cmd.OutOrStdout(), v)
	}
	_, err := io.WriteString(cmd.OutOrStdout(), table())
	return err
}

func newWhoamiCommand(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Show the controller's view of your token: name, role, tenant or host",
		Args:  argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.fleetClient()
			if err != nil {
				return err
			}
			res, err := c.WhoAmIWithResponse(cmd.Context())
			who, err := answer(res, res.GetJSON200(), err)
			if err != nil {
				return err
			}
			return printOr(cmd, asJSON, who, func() string {
				return renderFields([][2]string{{"Token", clean(who.TokenId)}, {"Name", clean(who.Name)}, {"Role", clean(string(who.Role))},
					{"Tenant", opt(who.Tenant)}, {"Host", opt(who.Host)}, {"Controller", clean(who.Version)}})
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func newHostCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "List, inspect, drain and delete the fleet's hosts (controller, operator)",
		Long: `The hosts that run sluiced and registered with sluice-controller, their
state (down once they missed their heartbeats, draining while an operator
drains them) and GPUs.

To retire a host: drain it (no new VM is placed there), move its VMs
elsewhere (vm move NAME), stop its sluiced, then delete it.`,
		Args: groupArgs,
		RunE: groupRun,
	}
	var asJSON bool
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List hosts: NAME STATE GPUS VMS ADDRESS VERSION LAST HEARTBEAT",
		Example: `  sluicectl --controller http://ctl:7070 --token "$T" host list`,
		Args:    argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.fleetClient()
			if err != nil {
				return err
			}
			res, err := c.ListHostsWithResponse(cmd.Context())
			hosts, err := answer(res, res.GetJSON200(), err)
			if err != nil {
				return fmt.Errorf("listing hosts: %w", err)
			}
			return printOr(cmd, asJSON, hosts, func() string { return RenderHostTable(hosts) })
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print the hosts as a JSON array")
	var getJSON bool
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Describe one host and its GPUs",
		Args:  argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.fleetClient()
			if err != nil {
				return err
			}
			res, err := c.GetHostWithResponse(cmd.Context(), args[0])
			h, err := answer(res, res.GetJSON200(), err)
			if err != nil {
				return err
			}
			return printOr(cmd, getJSON, h, func() string { return RenderHostTable([]controllerapi.Host{h}) + "\n" + RenderGPUTable(h.Gpus) })
		},
	}
	get.Flags().BoolVar(&getJSON, "json", false, "print the host as JSON")
	cmd.AddCommand(list, get, newHostDrainCommand(a, true), newHostDrainCommand(a, false), newHostDeleteCommand(a))
	return cmd
}

// newHostDrainCommand is "host drain" or, with drain false, "host undrain".
func newHostDrainCommand(a *app, drain bool) *cobra.Command {
	var asJSON bool
	use, short := "drain NAME", "Drain a host: it takes no new VMs; those on it stay until moved"
	if !drain {
		use, short = "undrain NAME", "End a host's draining: it takes new VMs again"
	}
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: `  sluicectl --controller http://ctl:7070 --token "$T" host ` + use,
		Args:    argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.fleetClient()
			if err != nil {
				return err
			}
			var h controllerapi.Host
			if drain {
				res, rerr := c.DrainHostWithResponse(cmd.Context(), args[0])
				h, err = answer(res, res.GetJSON200(), rerr)
			} else {
				res, rerr := c.UndrainHostWithResponse(cmd.Context(), args[0])
				h, err = answer(res, res.GetJSON200(), rerr)
			}
			if err != nil {
				return fmt.Errorf("%s host %q: %w", strings.Fields(use)[0]+"ing", clean(args[0]), err)
			}
			return printOr(cmd, asJSON, h, func() string { return RenderHostTable([]controllerapi.Host{h}) })
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the host as JSON")
	return cmd
}

func newHostDeleteCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Delete a host and its GPUs (refused while VMs are placed on it); its usage stays",
		Long: `Delete a host and its GPUs from the controller; its usage stays. Refused
while VMs are placed on it (move or delete them first). Stop the host's
sluiced (or revoke its token) first: a running sluiced registers again.`,
		Example: `  sluicectl --controller http://ctl:7070 --token "$T" host delete gpu-host-3`,
		Args:    argsNamed("NAME"),
		RunE: runNoContent(a, "deleting host %q", "host %q deleted",
			func(ctx context.Context, c *controllerapi.ClientWithResponses, name string) (apiResponse, error) {
				return c.DeleteHostWithResponse(ctx, name)
			}),
	}
}

// runNoContent is the RunE of a command that asks the controller for a
// change of args[0] answered without a body: it prints done, or the error
// after doing (both formats take the name).
func runNoContent(a *app, doing, done string,
	call func(context.Context, *controllerapi.ClientWithResponses, string) (apiResponse, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := a.fleetClient()
		if err != nil {
			return err
		}
		res, err := call(cmd.Context(), c, args[0])
		if _, err := answer[struct{}](res, nil, err); err != nil {
			return fmt.Errorf(doing+": %w", clean(args[0]), err)
		}
		_, err = fmt.Fprintf(cmd.OutOrStdout(), done+"\n", clean(args[0]))
		return err
	}
}

func newGPUCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gpu",
		Short: "The fleet's GPU inventory (controller, operator)",
		Args:  groupArgs,
		RunE:  groupRun,
	}
	var asJSON bool
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List GPUs: HOST GPU MODEL MEMORY PLACED VMS PCI NUMA DRIVER IOMMU SR-IOV VFS (PLACED: the memory quotas of the VMs on it; SR-IOV: enabled/total VFs; -: absent)",
		Args:    argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.fleetClient()
			if err != nil {
				return err
			}
			res, err := c.ListGPUsWithResponse(cmd.Context())
			gpus, err := answer(res, res.GetJSON200(), err)
			if err != nil {
				return fmt.Errorf("listing GPUs: %w", err)
			}
			return printOr(cmd, asJSON, gpus, func() string { return RenderGPUTable(gpus) })
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print the GPUs as a JSON array")
	cmd.AddCommand(list)
	return cmd
}

func newTokenCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke the controller's bearer tokens (operator)",
		Long: `Tokens of sluice-controller. Role operator may do everything; tenant sees and
changes only its tenant's VMs and usage; host is a sluiced's: it registers
its host, heartbeats and pushes usage. Only a hash of each token is stored:
its secret is printed once, when it is created.`,
		Args: groupArgs,
		RunE: groupRun,
	}
	var req controllerapi.CreateTokenRequest
	var tenant, host, role string
	var createJSON bool
	create := &cobra.Command{
		Use:   "create NAME --role operator|tenant|host [--tenant T | --host H]",
		Short: "Create a token and print its secret (shown this once)",
		Example: `  sluicectl token create alice --role tenant --tenant acme
  sluicectl token create gpu-host-1 --role host --host gpu-host-1
  T=$(sluicectl token create ci --role operator)`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.fleetClient()
			if err != nil {
				return err
			}
			req.Name, req.Role = args[0], controllerapi.Role(role)
			if tenant != "" {
				req.Tenant = &tenant
			}
			if host != "" {
				req.Host = &host
			}
			res, err := c.CreateTokenWithResponse(cmd.Context(), req)
			nt, err := answer(res, res.JSON201, err)
			if err != nil {
				return fmt.Errorf("creating token %q: %w", clean(args[0]), err)
			}
			if createJSON {
				return writeJSON(cmd.OutOrStdout(), nt)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "token %s (%s, role %s) created; its secret, shown this once:\n", clean(nt.Token.Id), clean(nt.Token.Name), clean(string(nt.Token.Role)))
			_, err = fmt.Fprintln(cmd.OutOrStdout(), nt.Secret)
			return err
		},
	}
	create.Flags().StringVar(&role, "role", "", "operator, tenant or host")
	create.Flags().StringVar(&tenant, "tenant", "", "for role tenant: the tenant")
	create.Flags().StringVar(&host, "host", "", "for role host: the host name")
	create.Flags().BoolVar(&createJSON, "json", false, "print the token and its secret as JSON")
	var listJSON bool
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List tokens (never their secrets): ID NAME ROLE SCOPE CREATED CREATED BY REVOKED",
		Args:    argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.fleetClient()
			if err != nil {
				return err
			}
			res, err := c.ListTokensWithResponse(cmd.Context())
			toks, err := answer(res, res.GetJSON200(), err)
			if err != nil {
				return fmt.Errorf("listing tokens: %w", err)
			}
			return printOr(cmd, listJSON, toks, func() string { return RenderTokenTable(toks) })
		},
	}
	list.Flags().BoolVar(&listJSON, "json", false, "print the tokens as a JSON array")
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a token: it stops working at once",
		Args:  argsNamed("ID"),
		RunE: runNoContent(a, "revoking token %q", "token %s revoked",
			func(ctx context.Context, c *controllerapi.ClientWithResponses, id string) (apiResponse, error) {
				return c.RevokeTokenWithResponse(ctx, id)
			}),
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func newUsageCommand(a *app) *cobra.Command {
	var vm, tenant, from, to string
	var asJSON, asCSV bool
	cmd := &cobra.Command{
		Use:   "usage [--vm NAME] [--tenant T] [--from TIME] [--to TIME] [--csv|--json]",
		Short: "GPU time per VM and interval, as the hosts reported it (controller; billing data)",
		Long: `Query the usage intervals sluice-controller holds: GPU nanoseconds and kernels
per VM per interval, pushed by the hosts, each counted once. Filter by VM, by
tenant (a tenant token sees its own only) and by time: --from keeps the
intervals that end after it, --to those that start before it. A time is RFC
3339 (2026-11-01T12:00:00Z), a date (2026-11-01, UTC) or a duration ago
(24h). --csv prints the controller's CSV export; --json the report.`,
		Example: `  sluicectl usage --tenant acme --from 2026-11-01 --to 2026-12-01
  sluicectl usage --vm web --from 24h --json | jq .total_gpu_ns
  sluicectl usage --tenant acme --from 2026-11-01 --csv > acme-november.csv`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON && asCSV {
				return usageErrorf("--json and --csv exclude each other")
			}
			now := time.Now()
			f, err := parseTime("from", from, now)
			if err != nil {
				return err
			}
			t, err := parseTime("to", to, now)
			if err != nil {
				return err
			}
			c, err := a.fleetClient()
			if err != nil {
				return err
			}
			ptr := func(s string) *string {
				if s == "" {
					return nil
				}
				return &s
			}
			if asCSV {
				res, err := c.ExportUsageCSVWithResponse(cmd.Context(), &controllerapi.ExportUsageCSVParams{Vm: ptr(vm), Tenant: ptr(tenant), From: f, To: t})
				if _, err := answer[struct{}](res, nil, err); err != nil {
					return fmt.Errorf("exporting usage: %w", err)
				}
				_, err = cmd.OutOrStdout().Write(res.Body)
				return err
			}
			res, err := c.QueryUsageWithResponse(cmd.Context(), &controllerapi.QueryUsageParams{Vm: ptr(vm), Tenant: ptr(tenant), From: f, To: t})
			u, err := answer(res, res.GetJSON200(), err)
			if err != nil {
				return fmt.Errorf("querying usage: %w", err)
			}
			return printOr(cmd, asJSON, u, func() string { return RenderUsageTable(u) })
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&vm, "vm", "", "only this VM")
	fl.StringVar(&tenant, "tenant", "", "only this tenant")
	fl.StringVar(&from, "from", "", "only intervals ending after this time")
	fl.StringVar(&to, "to", "", "only intervals starting before this time")
	fl.BoolVar(&asCSV, "csv", false, "print CSV: host,vm,tenant,seq,start,end,gpu_ns,kernels")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func newEventCommand(a *app) *cobra.Command {
	var since string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "events [--since TIME] [--limit N]",
		Aliases: []string{"event"},
		Short:   "The controller's audit log, newest first: who changed what (operator)",
		Example: `  sluicectl events --limit 20
  sluicectl events --since 1h --json`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := parseTime("since", since, time.Now())
			if err != nil {
				return err
			}
			c, err := a.fleetClient()
			if err != nil {
				return err
			}
			p := &controllerapi.ListEventsParams{Since: s}
			if cmd.Flags().Changed("limit") {
				p.Limit = &limit
			}
			res, err := c.ListEventsWithResponse(cmd.Context(), p)
			evs, err := answer(res, res.GetJSON200(), err)
			if err != nil {
				return fmt.Errorf("listing events: %w", err)
			}
			return printOr(cmd, asJSON, evs, func() string { return RenderEventTable(evs) })
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "only events at or after this time (RFC 3339, a date, or a duration ago)")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many events (1..10000)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the events as a JSON array")
	return cmd
}
