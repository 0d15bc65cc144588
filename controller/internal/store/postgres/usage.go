package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"sort"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// IngestUsage stores the intervals that are new, all or none, in one
// transaction. An interval stored already (same host, VM and sequence
// number) with the same content is a duplicate and counted once; one with
// different content fails the batch with an *fleet.IntervalError wrapping
// fleet.ErrConflict. Each new interval is charged to its VM's tenant: the
// VM's now, else that of the VM's latest interval (a VM deleted since),
// else none ("").
//
// Controllers sharing the database may ingest the same intervals at once:
// the insert is ON CONFLICT DO NOTHING on the key, which waits for a
// concurrent insert of that key to commit or roll back, so exactly one
// transaction stores each interval and the others see it as stored. The
// transaction is READ COMMITTED, so that the row a concurrent controller
// committed is visible to the comparison that follows; the intervals go in
// key order, so that two batches never wait on each other crosswise.
func (s *Store) IngestUsage(ctx context.Context, intervals []fleet.UsageInterval) (accepted, duplicates int, err error) {
	order := make([]int, len(intervals))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := intervals[order[a]], intervals[order[b]]
		return cmp.Or(cmp.Compare(x.Host, y.Host), cmp.Compare(x.VM, y.VM), cmp.Compare(x.Seq, y.Seq)) < 0
	})
	err = s.tx(ctx, sql.LevelReadCommitted, func(tx *sql.Tx) error {
		accepted, duplicates = 0, 0
		for _, i := range order {
			u := intervals[i]
			res, err := tx.ExecContext(ctx, `INSERT INTO usage (host, vm, seq, tenant, start_ns, end_ns, gpu_ns, kernels)
				VALUES ($1, $2, $3, COALESCE((SELECT tenant FROM vms WHERE name = $2),
					(SELECT tenant FROM usage WHERE vm = $2 ORDER BY end_ns DESC LIMIT 1), ''), $4, $5, $6, $7)
				ON CONFLICT (host, vm, seq) DO NOTHING`,
				u.Host, u.VM, u.Seq, nanos(u.Start), nanos(u.End), u.GPUNs, u.Kernels)
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
			err = tx.QueryRowContext(ctx, `SELECT host, vm, seq, start_ns, end_ns, gpu_ns, kernels FROM usage
				WHERE host = $1 AND vm = $2 AND seq = $3`, u.Host, u.VM, u.Seq).
				Scan(&old.Host, &old.VM, &old.Seq, &start, &end, &old.GPUNs, &old.Kernels)
			if err != nil {
				return fmt.Errorf("looking up interval %d: %w", i, err)
			}
			old.Start, old.End = fromNanos(start), fromNanos(end)
			if !old.SameContent(u) {
				return &fleet.IntervalError{Index: i, Err: fmt.Errorf("host %q vm %q seq %d is stored with other content: %w", u.Host, u.VM, u.Seq, fleet.ErrConflict)}
			}
			duplicates++
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
	rows, err := s.db.QueryContext(ctx, `SELECT host, vm, tenant, seq, start_ns, end_ns, gpu_ns, kernels FROM usage
		WHERE ($1 = '' OR vm = $2) AND ($3 = '' OR tenant = $4) AND end_ns > $5 AND start_ns < $6
		ORDER BY start_ns, host, vm, seq`,
		q.VM, q.VM, q.Tenant, q.Tenant, nanos(q.From), to)
	if err != nil {
		return nil, fmt.Errorf("querying usage: %w", err)
	}
	defer rows.Close()
	var out []fleet.UsageInterval
	for rows.Next() {
		var u fleet.UsageInterval
		var start, end int64
		if err := rows.Scan(&u.Host, &u.VM, &u.Tenant, &u.Seq, &start, &end, &u.GPUNs, &u.Kernels); err != nil {
			return nil, fmt.Errorf("reading an interval: %w", err)
		}
		u.Start, u.End = fromNanos(start), fromNanos(end)
		out = append(out, u)
	}
	return out, rows.Err()
}
