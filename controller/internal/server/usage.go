package server

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

const maxIntervals = 10000

// IngestUsage stores a host's usage intervals, idempotently (its host
// token, or an operator).
func (s *Server) IngestUsage(w http.ResponseWriter, r *http.Request) {
	out, err := func() (controllerapi.IngestReport, error) {
		ctx := r.Context()
		p := principal(ctx)
		if err := requireRole(p, fleet.RoleOperator, fleet.RoleHost); err != nil {
			return controllerapi.IngestReport{}, err
		}
		var req controllerapi.IngestUsageRequest
		if err := decodeBody(w, r, &req); err != nil {
			return controllerapi.IngestReport{}, err
		}
		if err := checkName("host", req.Host); err != nil {
			return controllerapi.IngestReport{}, err
		}
		if !p.ActsForHost(req.Host) {
			return controllerapi.IngestReport{}, forbidden("host", "this token acts for host %q, not %q", p.Host, req.Host)
		}
		if req.Intervals == nil {
			return controllerapi.IngestReport{}, invalid("intervals", "field intervals is required")
		}
		if len(req.Intervals) > maxIntervals {
			return controllerapi.IngestReport{}, invalid("intervals", "%d intervals: at most %d a request", len(req.Intervals), maxIntervals)
		}
		if _, err := s.cfg.Store.Host(ctx, req.Host); err != nil {
			return controllerapi.IngestReport{}, withField(err, "host")
		}
		batch := make([]fleet.UsageInterval, 0, len(req.Intervals))
		for i, in := range req.Intervals {
			u, err := checkInterval(req.Host, i, in)
			if err != nil {
				return controllerapi.IngestReport{}, err
			}
			batch = append(batch, u)
		}
		acc, dup, err := s.cfg.Store.IngestUsage(ctx, batch)
		if err == nil {
			s.metrics.Ingested(acc, dup)
		}
		var ie *fleet.IntervalError
		if errors.As(err, &ie) {
			return controllerapi.IngestReport{}, withField(err, fmt.Sprintf("intervals[%d]", ie.Index))
		}
		return controllerapi.IngestReport{Accepted: acc, Duplicates: dup}, err
	}()
	s.reply(w, r, http.StatusOK, out, err)
}

func checkInterval(host string, i int, in controllerapi.UsageInterval) (fleet.UsageInterval, error) {
	f := func(name string) string { return fmt.Sprintf("intervals[%d].%s", i, name) }
	if err := checkName(f("vm"), in.Vm); err != nil {
		return fleet.UsageInterval{}, err
	}
	u := fleet.UsageInterval{Host: host, VM: in.Vm, Seq: in.Seq, Start: in.Start.UTC(), End: in.End.UTC(), GPUNs: in.GpuNs}
	if in.Kernels != nil {
		u.Kernels = *in.Kernels
	}
	switch {
	case u.Seq < 0:
		return u, invalid(f("seq"), "field %s %d: want 0 or more", f("seq"), u.Seq)
	case u.Start.IsZero():
		return u, invalid(f("start"), "field %s is required", f("start"))
	case u.End.IsZero():
		return u, invalid(f("end"), "field %s is required", f("end"))
	case !storable(u.Start):
		return u, invalid(f("start"), "field %s %s: want a time from 1970 to 2261", f("start"), u.Start.Format(time.RFC3339))
	case !storable(u.End):
		return u, invalid(f("end"), "field %s %s: want a time from 1970 to 2261", f("end"), u.End.Format(time.RFC3339))
	case u.End.Before(u.Start):
		return u, invalid(f("end"), "field %s is before %s", f("end"), f("start"))
	case u.GPUNs < 0:
		return u, invalid(f("gpu_ns"), "field %s %d: a counter never goes backwards", f("gpu_ns"), u.GPUNs)
	case u.Kernels < 0:
		return u, invalid(f("kernels"), "field %s %d: a counter never goes backwards", f("kernels"), u.Kernels)
	}
	return u, nil
}

// storable reports whether t fits the store's Unix nanoseconds.
func storable(t time.Time) bool {
	return t.Year() >= 1970 && t.Year() < 2262
}

// usageQuery is the query the caller may make: a tenant's is its own.
func (s *Server) usageQuery(ctx context.Context, vm, tenant *string, from, to *time.Time) (fleet.UsageQuery, error) {
	p := principal(ctx)
	if err := requireRole(p, fleet.RoleOperator, fleet.RoleTenant); err != nil {
		return fleet.UsageQuery{}, err
	}
	var q fleet.UsageQuery
	if vm != nil {
		q.VM = *vm
	}
	if tenant != nil {
		q.Tenant = *tenant
	}
	if p.Role == fleet.RoleTenant {
		if q.Tenant != "" && q.Tenant != p.Tenant {
			return q, forbidden("tenant", "this token is tenant %q's, not %q's", p.Tenant, q.Tenant)
		}
		q.Tenant = p.Tenant
	}
	if from != nil {
		if !storable(*from) {
			return q, invalid("from", "parameter from: want a time from 1970 to 2261")
		}
		q.From = *from
	}
	if to != nil {
		if !storable(*to) {
			return q, invalid("to", "parameter to: want a time from 1970 to 2261")
		}
		q.To = *to
	}
	if !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To) {
		return q, invalid("to", "parameter to must be after from")
	}
	return q, nil
}

// QueryUsage answers usage intervals and their totals.
func (s *Server) QueryUsage(w http.ResponseWriter, r *http.Request, params controllerapi.QueryUsageParams) {
	out, err := func() (controllerapi.UsageReport, error) {
		q, err := s.usageQuery(r.Context(), params.Vm, params.Tenant, params.From, params.To)
		if err != nil {
			return controllerapi.UsageReport{}, err
		}
		us, err := s.cfg.Store.QueryUsage(r.Context(), q)
		out := controllerapi.UsageReport{Intervals: []controllerapi.UsageRecord{}}
		for _, u := range us {
			out.Intervals = append(out.Intervals, apiUsage(u))
			out.TotalGpuNs += u.GPUNs
			out.TotalKernels += u.Kernels
		}
		return out, err
	}()
	s.reply(w, r, http.StatusOK, out, err)
}

// CSVHeader is the first line of the usage export.
var CSVHeader = []string{"host", "vm", "tenant", "seq", "start", "end", "gpu_ns", "kernels"}

// ExportUsageCSV answers the same query as QueryUsage as CSV.
func (s *Server) ExportUsageCSV(w http.ResponseWriter, r *http.Request, params controllerapi.ExportUsageCSVParams) {
	q, err := s.usageQuery(r.Context(), params.Vm, params.Tenant, params.From, params.To)
	var us []fleet.UsageInterval
	if err == nil {
		us, err = s.cfg.Store.QueryUsage(r.Context(), q)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="usage.csv"`)
	cw := csv.NewWriter(w)
	cw.Write(CSVHeader)
	for _, u := range us {
		cw.Write([]string{u.Host, u.VM, u.Tenant, strconv.FormatInt(u.Seq, 10), u.Start.Format(time.RFC3339Nano),
			u.End.Format(time.RFC3339Nano), strconv.FormatInt(u.GPUNs, 10), strconv.FormatInt(u.Kernels, 10)})
	}
	cw.Flush()
}
