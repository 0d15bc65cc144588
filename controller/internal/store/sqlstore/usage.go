package sqlstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// IngestUsage stores the intervals that are new, all or none, in one
// transaction. An interval stored already (same host, VM and sequence
// number) with the same content is a duplicate and counted once; one with
// different content fails the batch with an *fleet.IntervalError (the
// first such in the batch) wrapping fleet.ErrConflict. Each new interval is
// charged to its VM's tenant: the VM's now, else that of the VM's latest
// interval (a VM deleted since), else none ("").
//
// Controllers sharing a database may ingest the same intervals at once:
// the insert is ON CONFLICT DO NOTHING on the key, which waits for a
// concurrent insert of that key to commit or roll back, so exactly one
// transaction stores each interval and the others see it as stored. Where
// the dialect isolates changes (PostgreSQL), the transaction is READ
// COMMITTED, so that the row a concurrent controller committed is visible
// to the comparison that follows; the intervals go in key order, so that
// two batches never wait on each other crosswise.
func (s *Store) IngestUsage(ctx context.Context, intervals []fleet.UsageInterval) (accepted, duplicates int, err error) {
	order := make([]int, len(intervals))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := intervals[a], intervals[b]
		return cmp.Or(cmp.Compare(x.Host, y.Host), cmp.Compare(x.VM, y.VM), cmp.Compare(x.Seq, y.Seq))
	})
	err = s.tx(ctx, s.batchLevel(), func(c conn) error {
		accepted, duplicates = 0, 0
		var conflict *fleet.IntervalError
		for _, i := range order {
			u := intervals[i]
			res, err := c.exec(ctx, `INSERT INTO usage (host, vm, seq, tenant, start_ns, end_ns, gpu_ns, kernels)
				VALUES (?, ?, ?, COALESCE((SELECT tenant FROM vms WHERE name = ?),
					(SELECT tenant FROM usage WHERE vm = ? ORDER BY end_ns DESC LIMIT 1), ''), ?, ?, ?, ?)
				ON CONFLICT (host, vm, seq) DO NOTHING`,
				u.Host, u.VM, u.Seq, u.VM, u.VM, nanos(u.Start), nanos(u.End), u.GPUNs, u.Kernels)
			if err != nil {
				return fmt.Errorf("storing interval %d: %w", i, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("storing interval %d: %w", i, err)
			}
			if n == 1 {
				accepted++
				continue
			}
			var old fleet.UsageInterval
			var start, end int64
			err = c.queryRow(ctx, `SELECT host, vm, seq, start_ns, end_ns, gpu_ns, kernels FROM usage
				WHERE host = ? AND vm = ? AND seq = ?`, u.Host, u.VM, u.Seq).
				Scan(&old.Host, &old.VM, &old.Seq, &start, &end, &old.GPUNs, &old.Kernels)
			if err != nil {
				return fmt.Errorf("looking up interval %d: %w", i, err)
			}
			old.Start, old.End = fromNanos(start), fromNanos(end)
			if old.SameContent(u) {
				duplicates++
			} else if conflict == nil || i < conflict.Index {
				conflict = &fleet.IntervalError{Index: i, Err: fmt.Errorf("host %q vm %q seq %d is stored with other content: %w", u.Host, u.VM, u.Seq, fleet.ErrConflict)}
			}
		}
		if conflict != nil {
			return conflict
		}
		return nil
	})
	if err != nil {
		accepted, duplicates = 0, 0
	}
	return accepted, duplicates, err
}

// QueryUsage returns the intervals q selects, by start time.
func (s *Store) QueryUsage(ctx context.Context, q fleet.UsageQuery) ([]fleet.UsageInterval, error) {
	to := int64(1<<63 - 1)
	if !q.To.IsZero() {
		to = q.To.UnixNano()
	}
	rows, err := s.read().query(ctx, `SELECT host, vm, tenant, seq, start_ns, end_ns, gpu_ns, kernels FROM usage
		WHERE (? = '' OR vm = ?) AND (? = '' OR tenant = ?) AND end_ns > ? AND start_ns < ?
		ORDER BY start_ns, host, vm, seq`,
		q.VM, q.VM, q.Tenant, q.Tenant, nanos(q.From), to)
	return scanAll(rows, err, "querying usage", "an interval", func(row scanner) (fleet.UsageInterval, error) {
		var u fleet.UsageInterval
		var start, end int64
		err := row.Scan(&u.Host, &u.VM, &u.Tenant, &u.Seq, &start, &end, &u.GPUNs, &u.Kernels)
		u.Start, u.End = fromNanos(start), fromNanos(end)
		return u, err
	})
}
