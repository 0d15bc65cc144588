package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// IngestUsage stores the intervals that are new, all or none, in one
// transaction. An interval stored already (same host, VM and sequence
// number) with the same content is a duplicate and counted once; one with
// different content fails the batch with an *fleet.IntervalError wrapping
// fleet.ErrConflict. Each new interval is charged to its VM's tenant: the
// VM's now, else that of the VM's latest interval (a VM deleted since),
// else none ("").
func (s *Store) IngestUsage(ctx context.Context, intervals []fleet.UsageInterval) (accepted, duplicates int, err error) {
	err = s.tx(ctx, func(tx *sql.Tx) error {
		accepted, duplicates = 0, 0
		for i, u := range intervals {
			var old fleet.UsageInterval
			var start, end int64
			err := tx.QueryRowContext(ctx, `SELECT host, vm, seq, start_ns, end_ns, gpu_ns, kernels FROM usage
				WHERE host = ? AND vm = ? AND seq = ?`, u.Host, u.VM, u.Seq).
				Scan(&old.Host, &old.VM, &old.Seq, &start, &end, &old.GPUNs, &old.Kernels)
			switch {
			case err == nil:
				old.Start, old.End = fromNanos(start), fromNanos(end)
				if !old.SameContent(u) {
					return &fleet.IntervalError{Index: i, Err: fmt.Errorf("host %q vm %q seq %d is stored with other content: %w", u.Host, u.VM, u.Seq, fleet.ErrConflict)}
				}
				duplicates++
				continue
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("looking up interval %d: %w", i, err)
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO usage (host, vm, seq, tenant, start_ns, end_ns, gpu_ns, kernels)
				VALUES (?, ?, ?, COALESCE((SELECT tenant FROM vms WHERE name = ?),
					(SELECT tenant FROM usage WHERE vm = ? ORDER BY end_ns DESC LIMIT 1), ''), ?, ?, ?, ?)`,
				u.Host, u.VM, u.Seq, u.VM, u.VM, nanos(u.Start), nanos(u.End), u.GPUNs, u.Kernels)
			if err != nil {
				return fmt.Errorf("storing interval %d: %w", i, err)
			}
			accepted++
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
		WHERE (? = '' OR vm = ?) AND (? = '' OR tenant = ?) AND end_ns > ? AND start_ns < ?
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
