package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

const vmColumns = `name, tenant, weight, cap, memory_bytes, host, gpu, created, updated, generation`

func scanVM(row interface{ Scan(...any) error }) (fleet.VM, error) {
	var v fleet.VM
	var created, updated int64
	err := row.Scan(&v.Name, &v.Tenant, &v.Weight, &v.Cap, &v.MemoryBytes, &v.Host, &v.GPU, &created, &updated, &v.Generation)
	v.Created, v.Updated = fromNanos(created), fromNanos(updated)
	return v, err
}

// CreateVM stores vm and records ev; fleet.ErrExists if the name is taken,
// fleet.ErrNotFound if its GPU is not in the inventory.
func (s *Store) CreateVM(ctx context.Context, vm fleet.VM, ev fleet.Event) error {
	return s.change(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO vms (`+vmColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			vm.Name, vm.Tenant, vm.Weight, vm.Cap, vm.MemoryBytes, vm.Host, vm.GPU, nanos(vm.Created), nanos(vm.Updated), vm.Generation)
		if err != nil {
			return vmWriteError(vm, err)
		}
		return insertEvent(ctx, tx, ev)
	})
}

// vmWriteError maps constraint failures to the sentinels.
func vmWriteError(vm fleet.VM, err error) error {
	switch sqlState(err) {
	case uniqueViolation:
		return fmt.Errorf("vm %q: %w", vm.Name, fleet.ErrExists)
	case foreignKeyViolation:
		return fmt.Errorf("GPU %d of host %q: %w", vm.GPU, vm.Host, fleet.ErrNotFound)
	}
	return fmt.Errorf("storing vm %q: %w", vm.Name, err)
}

// VM returns VM name.
func (s *Store) VM(ctx context.Context, name string) (fleet.VM, error) {
	v, err := scanVM(s.db.QueryRowContext(ctx, `SELECT `+vmColumns+` FROM vms WHERE name = $1`, name))
	if err != nil {
		return v, notFound(err, fmt.Sprintf("vm %q", name))
	}
	return v, nil
}

// ListVMs returns the VMs of tenant (every VM for ""), by name.
func (s *Store) ListVMs(ctx context.Context, tenant string) ([]fleet.VM, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+vmColumns+` FROM vms WHERE $1 = '' OR tenant = $2 ORDER BY name`, tenant, tenant)
	if err != nil {
		return nil, fmt.Errorf("listing vms: %w", err)
	}
	defer rows.Close()
	var out []fleet.VM
	for rows.Next() {
		v, err := scanVM(rows)
		if err != nil {
			return nil, fmt.Errorf("reading a vm: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// UpdateVM replaces the settings and place of VM vm.Name (not its tenant or
// creation time) and records ev.
func (s *Store) UpdateVM(ctx context.Context, vm fleet.VM, ev fleet.Event) error {
	return s.change(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE vms SET weight = $1, cap = $2, memory_bytes = $3, host = $4, gpu = $5,
			updated = $6, generation = $7 WHERE name = $8`,
			vm.Weight, vm.Cap, vm.MemoryBytes, vm.Host, vm.GPU, nanos(vm.Updated), vm.Generation, vm.Name)
		if err != nil {
			return vmWriteError(vm, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("vm %q: %w", vm.Name, fleet.ErrNotFound)
		}
		return insertEvent(ctx, tx, ev)
	})
}

// DeleteVM removes VM name (its usage stays) and records ev.
func (s *Store) DeleteVM(ctx context.Context, name string, ev fleet.Event) error {
	return s.change(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM vms WHERE name = $1`, name)
		if err != nil {
			return fmt.Errorf("deleting vm %q: %w", name, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("vm %q: %w", name, fleet.ErrNotFound)
		}
		return insertEvent(ctx, tx, ev)
	})
}
