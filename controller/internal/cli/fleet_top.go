package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
)

// fleetSample is what one frame of the fleet's top shows: the hosts, the
// VMs, and the usage the hosts reported over the window before now.
type fleetSample struct {
	at     time.Time
	window time.Duration
	hosts  []controllerapi.Host // nil for a tenant (it may not list hosts)
	vms    []controllerapi.VM
	usage  []controllerapi.UsageRecord
}

// sampleFleet reads a frame from the controller. A tenant's token may not
// list hosts: the frame then shows its VMs only.
func (a *app) sampleFleet(ctx context.Context, window time.Duration) (fleetSample, error) {
	c, err := a.fleetClient()
	if err != nil {
		return fleetSample{}, err
	}
	s := fleetSample{at: time.Now(), window: window}
	vres, err := c.ListVMsWithResponse(ctx, &controllerapi.ListVMsParams{})
	if s.vms, err = answer(vres, vres.GetJSON200(), err); err != nil {
		return s, fmt.Errorf("listing VMs: %w", err)
	}
	if hres, err := c.ListHostsWithResponse(ctx); err == nil && hres.JSON200 != nil {
		s.hosts = *hres.JSON200
	}
	// Twice the window back: each VM's window ends at the last interval its
	// host reported, which lags the wall clock by the hosts' push period.
	from := s.at.Add(-2 * window)
	ures, err := c.QueryUsageWithResponse(ctx, &controllerapi.QueryUsageParams{From: &from})
	u, err := answer(ures, ures.GetJSON200(), err)
	if err != nil {
		return s, fmt.Errorf("querying usage: %w", err)
	}
	s.usage = u.Intervals
	return s, nil
}

// vmRate is a VM's GPU time and kernels over the window that ends at the
// last interval its host reported (intervals cut by the window's start
// count in proportion), and that end.
type vmRate struct {
	gpuNs, kernels float64
	end            time.Time
}

func fleetRates(usage []controllerapi.UsageRecord, window time.Duration) map[string]vmRate {
	ends := map[string]time.Time{}
	for _, r := range usage {
		if r.End.After(ends[r.Vm]) {
			ends[r.Vm] = r.End
		}
	}
	out := map[string]vmRate{}
	for _, r := range usage {
		end := ends[r.Vm]
		from := end.Add(-window)
		span := r.End.Sub(r.Start)
		lo, hi := maxTime(r.Start, from), minTime(r.End, end)
		if span <= 0 || !hi.After(lo) {
			continue
		}
		f := float64(hi.Sub(lo)) / float64(span)
		v := out[r.Vm]
		v.gpuNs += f * float64(r.GpuNs)
		v.kernels += f * float64(r.Kernels)
		v.end = end
		out[r.Vm] = v
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// RenderFleetTop renders one frame of the fleet's top.
func RenderFleetTop(s fleetSample) string {
	var b strings.Builder
	rates := fleetRates(s.usage, s.window)
	up, gpus := 0, 0
	for _, h := range s.hosts {
		if h.State == controllerapi.Up {
			up++
		}
		gpus += len(h.Gpus)
	}
	if s.hosts != nil {
		fmt.Fprintf(&b, "fleet at %s: %d hosts (%d up), %d GPUs, %d VMs; rates over the last %v each VM's host reported\n\n",
			s.at.UTC().Format(time.RFC3339), len(s.hosts), up, gpus, len(s.vms), s.window)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "HOST\tSTATE\tGPUS\tVMS\tLAST HEARTBEAT")
		for _, h := range s.hosts {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", h.Name, hostState(h), len(h.Gpus), h.Vms, h.LastHeartbeat.UTC().Format(time.RFC3339))
		}
		tw.Flush()
		b.WriteString("\n")
	} else {
		fmt.Fprintf(&b, "fleet at %s: %d VMs; rates over the last %v each VM's host reported\n\n",
			s.at.UTC().Format(time.RFC3339), len(s.vms), s.window)
	}
	vms := append([]controllerapi.VM(nil), s.vms...)
	sort.Slice(vms, func(i, j int) bool { return vms[i].Name < vms[j].Name })
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VM\tTENANT\tHOST\tGPU\tWEIGHT\tCAP\tGPU%\tGPU TIME\tKERNELS/S\tREPORTED")
	for _, v := range vms {
		host := v.Host
		if v.HostDown {
			host += " (down)"
		}
		capCell := "-"
		if v.Cap > 0 {
			capCell = fmt.Sprintf("%g%%", 100*v.Cap)
		}
		pct, gpuTime, kps, rep := "-", "-", "-", "-"
		if r, ok := rates[v.Name]; ok {
			pct = fmt.Sprintf("%.1f", 100*r.gpuNs/float64(s.window))
			gpuTime = time.Duration(r.gpuNs).Round(time.Microsecond).String()
			kps = fmt.Sprintf("%.1f", r.kernels/s.window.Seconds())
			rep = r.end.UTC().Format(time.TimeOnly)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.Tenant, host, v.Gpu, v.Weight, capCell, pct, gpuTime, kps, rep)
	}
	tw.Flush()
	return b.String()
}

// runFleetTop prints frames of the fleet's top (0: until ctx is done),
// interval apart.
func (a *app) runFleetTop(ctx context.Context, out io.Writer, interval, window time.Duration, frames int) error {
	term := a.opts.IsTerminal(out)
	for n := 0; frames == 0 || n < frames; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(interval):
			}
		}
		s, err := a.sampleFleet(ctx, window)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		frame := RenderFleetTop(s)
		switch {
		case term:
			fmt.Fprint(out, "\x1b[H\x1b[2J"+frame)
		case n > 0:
			fmt.Fprint(out, "\n"+frame)
		default:
			fmt.Fprint(out, frame)
		}
	}
	return nil
}
