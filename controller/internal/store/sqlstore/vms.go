package sqlstore

import (
	"context"
	"fmt"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

const vmColumns = `name, tenant, weight, cap, memory_bytes, host, gpu, created, updated, generation`

func scanVM(row scanner) (fleet.VM, error) {
	var v fleet.VM
	var created, updated int64
	err := row.Scan(&v.Name, &v.Tenant, &v.Weight, &v.Cap, &v.MemoryBytes, &v.Host, &v.GPU, &created, &updated, &v.Generation)
	v.Created, v.Updated = fromNanos(created), fromNanos(updated)
	return v, err
}

// CreateVM stores vm and records ev; fleet.ErrExists if the name is taken,
// fleet.ErrNotFound if its GPU is not in the inventory.
func (s *Store) CreateVM(ctx context.Context, vm fleet.VM, ev fleet.Event) error {
	return s.change(ctx, func(c conn) error {
		_, err := c.exec(ctx, `INSERT INTO vms (`+vmColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			vm.Name, vm.Tenant, vm.Weight, vm.Cap, vm.MemoryBytes, vm.Host, vm.GPU, nanos(vm.Created), nanos(vm.Updated), vm.Generation)
		if err != nil {
			return s.vmWriteError(vm, err)
		}
		return insertEvent(ctx, c, ev)
	})
}

// vmWriteError maps constraint failures to the sentinels.
func (s *Store) vmWriteError(vm fleet.VM, err error) error {
	switch s.d.class(err) {
	case UniqueViolation:
		return fmt.Errorf("vm %q: %w", vm.Name, fleet.ErrExists)
	case ForeignKeyFailure:
		return fmt.Errorf("GPU %d of host %q: %w", vm.GPU, vm.Host, fleet.ErrNotFound)
	}
	return fmt.Errorf("storing vm %q: %w", vm.Name, err)
}

// deleteNamed deletes the row of table named name; fleet.ErrNotFound
// naming what when there is none.
func deleteNamed(ctx context.Context, c conn, table, name, what string) error {
	res, err := c.exec(ctx, `DELETE FROM `+table+` WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("deleting %s: %w", what, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%s: %w", what, fleet.ErrNotFound)
	}
	return nil
}

// VM returns VM name.
func (s *Store) VM(ctx context.Context, name string) (fleet.VM, error) {
	v, err := scanVM(s.read().queryRow(ctx, `SELECT `+vmColumns+` FROM vms WHERE name = ?`, name))
	if err != nil {
		return v, notFound(err, fmt.Sprintf("vm %q", name))
	}
	return v, nil
}

// ListVMs returns the VMs of tenant (every VM for ""), by name.
func (s *Store) ListVMs(ctx context.Context, tenant string) ([]fleet.VM, error) {
	rows, err := s.read().query(ctx, `SELECT `+vmColumns+` FROM vms WHERE ? = '' OR tenant = ? ORDER BY name`, tenant, tenant)
	return scanAll(rows, err, "listing vms", "a vm", scanVM)
}

// UpdateVM replaces the settings and place of VM vm.Name (not its tenant or
// creation time) and records ev.
func (s *Store) UpdateVM(ctx context.Context, vm fleet.VM, ev fleet.Event) error {
	return s.change(ctx, func(c conn) error {
		res, err := c.exec(ctx, `UPDATE vms SET weight = ?, cap = ?, memory_bytes = ?, host = ?, gpu = ?,
			updated = ?, generation = ? WHERE name = ?`,
			vm.Weight, vm.Cap, vm.MemoryBytes, vm.Host, vm.GPU, nanos(vm.Updated), vm.Generation, vm.Name)
		if err != nil {
			return s.vmWriteError(vm, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("vm %q: %w", vm.Name, fleet.ErrNotFound)
		}
		return insertEvent(ctx, c, ev)
	})
}

// DeleteVM removes VM name (its usage stays) and records ev.
func (s *Store) DeleteVM(ctx context.Context, name string, ev fleet.Event) error {
	return s.change(ctx, func(c conn) error {
		if err := deleteNamed(ctx, c, "vms", name, fmt.Sprintf("vm %q", name)); err != nil {
			return err
		}
		return insertEvent(ctx, c, ev)
	})
}
