package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// RegisterHost creates host h or refreshes its address, version, heartbeat
// and GPU inventory (h.GPUs replaces the stored list), marks it up, and
// records ev. A GPU that VMs are placed on may not disappear:
// fleet.ErrConflict, and nothing changes. h.Registered is kept for a host
// known already.
func (s *Store) RegisterHost(ctx context.Context, h fleet.Host, ev fleet.Event) error {
	return s.change(ctx, func(c conn) error {
		_, err := c.exec(ctx, `INSERT INTO hosts (name, address, version, registered, last_heartbeat, down)
			VALUES (?, ?, ?, ?, ?, FALSE)
			ON CONFLICT (name) DO UPDATE SET address = excluded.address, version = excluded.version,
				last_heartbeat = excluded.last_heartbeat, down = FALSE`,
			h.Name, h.Address, h.Version, nanos(h.Registered), nanos(h.LastHeartbeat))
		if err != nil {
			return fmt.Errorf("storing host %q: %w", h.Name, err)
		}
		keep := map[int]bool{}
		for _, g := range h.GPUs {
			keep[g.Index] = true
			_, err := c.exec(ctx, `INSERT INTO gpus (host, idx, model, memory_bytes, pci_address, numa_node, driver,
				iommu_group, sriov_totalvfs, sriov_numvfs, vfs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (host, idx) DO UPDATE SET model = excluded.model, memory_bytes = excluded.memory_bytes,
				pci_address = excluded.pci_address, numa_node = excluded.numa_node, driver = excluded.driver,
				iommu_group = excluded.iommu_group, sriov_totalvfs = excluded.sriov_totalvfs,
				sriov_numvfs = excluded.sriov_numvfs, vfs = excluded.vfs`,
				h.Name, g.Index, g.Model, g.MemoryBytes, g.PCIAddress, nullInt(g.NUMANode), g.Driver,
				nullInt(g.IOMMUGroup), nullInt(g.SRIOVTotalVFs), nullInt(g.SRIOVNumVFs), fleet.EncodeVFs(g.VFs))
			if err != nil {
				return fmt.Errorf("storing GPU %d of host %q: %w", g.Index, h.Name, err)
			}
		}
		rows, err := c.query(ctx, `SELECT idx FROM gpus WHERE host = ?`, h.Name)
		stored, err := scanAll(rows, err, fmt.Sprintf("listing the GPUs of host %q", h.Name), "a GPU",
			func(row scanner) (idx int, err error) { return idx, row.Scan(&idx) })
		if err != nil {
			return err
		}
		for _, idx := range stored {
			if keep[idx] {
				continue
			}
			var vm string
			err := c.queryRow(ctx, `SELECT name FROM vms WHERE host = ? AND gpu = ? LIMIT 1`, h.Name, idx).Scan(&vm)
			if err == nil {
				return fmt.Errorf("GPU %d of host %q holds VM %q and cannot leave the inventory: %w", idx, h.Name, vm, fleet.ErrConflict)
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("looking for VMs on GPU %d of host %q: %w", idx, h.Name, err)
			}
			if _, err := c.exec(ctx, `DELETE FROM gpus WHERE host = ? AND idx = ?`, h.Name, idx); err != nil {
				if s.d.class(err) == ForeignKeyFailure { // a VM placed there since
					return fmt.Errorf("GPU %d of host %q holds a VM and cannot leave the inventory: %w", idx, h.Name, fleet.ErrConflict)
				}
				return fmt.Errorf("removing GPU %d of host %q: %w", idx, h.Name, err)
			}
		}
		return insertEvent(ctx, c, ev)
	})
}

// Heartbeat records that host name was alive at at. A host marked down is
// marked up again and upEvent recorded; wasDown says so.
func (s *Store) Heartbeat(ctx context.Context, name string, at time.Time, upEvent fleet.Event) (wasDown bool, err error) {
	err = s.change(ctx, func(c conn) error {
		var down bool
		if err := c.queryRow(ctx, `SELECT down FROM hosts WHERE name = ?`, name).Scan(&down); err != nil {
			return notFound(err, fmt.Sprintf("host %q", name))
		}
		if _, err := c.exec(ctx, `UPDATE hosts SET last_heartbeat = `+s.d.Greatest+`(last_heartbeat, ?), down = FALSE WHERE name = ?`,
			nanos(at), name); err != nil {
			return fmt.Errorf("recording the heartbeat of host %q: %w", name, err)
		}
		wasDown = down
		if down {
			return insertEvent(ctx, c, upEvent)
		}
		return nil
	})
	return wasDown, err
}

// MarkDown marks host name down and records ev, unless it is down already
// or has heartbeated since staleBefore (a heartbeat raced the sweep);
// changed says whether it did.
func (s *Store) MarkDown(ctx context.Context, name string, staleBefore time.Time, ev fleet.Event) (changed bool, err error) {
	err = s.change(ctx, func(c conn) error {
		res, err := c.exec(ctx, `UPDATE hosts SET down = TRUE WHERE name = ? AND NOT down AND last_heartbeat < ?`, name, nanos(staleBefore))
		if err != nil {
			return fmt.Errorf("marking host %q down: %w", name, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("marking host %q down: %w", name, err)
		}
		if changed = n == 1; changed {
			return insertEvent(ctx, c, ev)
		}
		return nil
	})
	return changed, err
}

// SetDraining starts (draining) or ends the draining of host name and
// records ev; changed is false, and no event recorded, when the host was so
// already.
func (s *Store) SetDraining(ctx context.Context, name string, draining bool, ev fleet.Event) (changed bool, err error) {
	err = s.change(ctx, func(c conn) error {
		var was bool
		if err := c.queryRow(ctx, `SELECT draining FROM hosts WHERE name = ?`, name).Scan(&was); err != nil {
			return notFound(err, fmt.Sprintf("host %q", name))
		}
		if changed = was != draining; !changed {
			return nil
		}
		if _, err := c.exec(ctx, `UPDATE hosts SET draining = ? WHERE name = ?`, draining, name); err != nil {
			return fmt.Errorf("setting the draining of host %q: %w", name, err)
		}
		return insertEvent(ctx, c, ev)
	})
	return changed, err
}

// DeleteHost removes host name and its GPUs (its usage stays) and records
// ev. A host that VMs are placed on stays: fleet.ErrConflict naming them.
func (s *Store) DeleteHost(ctx context.Context, name string, ev fleet.Event) error {
	return s.change(ctx, func(c conn) error {
		rows, err := c.query(ctx, `SELECT name FROM vms WHERE host = ? ORDER BY name`, name)
		vms, err := scanAll(rows, err, fmt.Sprintf("listing the VMs on host %q", name), "a VM",
			func(row scanner) (vm string, err error) { return vm, row.Scan(&vm) })
		if err != nil {
			return err
		}
		if len(vms) > 0 {
			return fmt.Errorf("host %q holds %d VM(s), %s: move or delete them first: %w", name, len(vms), strings.Join(vms, ", "), fleet.ErrConflict)
		}
		if _, err := c.exec(ctx, `DELETE FROM endpoints WHERE host = ?`, name); err != nil {
			return fmt.Errorf("removing the endpoints of host %q: %w", name, err)
		}
		if _, err := c.exec(ctx, `DELETE FROM gpus WHERE host = ?`, name); err != nil {
			if s.d.class(err) == ForeignKeyFailure { // a VM placed there since
				return fmt.Errorf("host %q holds a VM: move or delete it first: %w", name, fleet.ErrConflict)
			}
			return fmt.Errorf("removing the GPUs of host %q: %w", name, err)
		}
		if err := deleteNamed(ctx, c, "hosts", name, fmt.Sprintf("host %q", name)); err != nil {
			return err
		}
		return insertEvent(ctx, c, ev)
	})
}

// Host returns host name with its GPUs.
func (s *Store) Host(ctx context.Context, name string) (fleet.Host, error) {
	hosts, err := s.hosts(ctx, name)
	if err != nil {
		return fleet.Host{}, err
	}
	if len(hosts) == 0 {
		return fleet.Host{}, fmt.Errorf("host %q: %w", name, fleet.ErrNotFound)
	}
	return hosts[0], nil
}

// ListHosts returns every host with its GPUs, by name.
func (s *Store) ListHosts(ctx context.Context) ([]fleet.Host, error) { return s.hosts(ctx, "") }

// hosts returns host name, or every host for "".
func (s *Store) hosts(ctx context.Context, name string) ([]fleet.Host, error) {
	rows, err := s.read().query(ctx, `SELECT name, address, version, registered, last_heartbeat, down, draining FROM hosts
		WHERE ? = '' OR name = ? ORDER BY name`, name, name)
	out, err := scanAll(rows, err, "listing hosts", "a host", func(row scanner) (fleet.Host, error) {
		var h fleet.Host
		var reg, hb int64
		err := row.Scan(&h.Name, &h.Address, &h.Version, &reg, &hb, &h.Down, &h.Draining)
		h.Registered, h.LastHeartbeat = fromNanos(reg), fromNanos(hb)
		return h, err
	})
	if err != nil {
		return nil, err
	}
	rows, err = s.read().query(ctx, `SELECT host, idx, model, memory_bytes, pci_address, numa_node, driver, iommu_group,
		sriov_totalvfs, sriov_numvfs, vfs FROM gpus WHERE ? = '' OR host = ? ORDER BY host, idx`, name, name)
	gpus, err := scanAll(rows, err, "listing GPUs", "a GPU", scanGPU)
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	for i, h := range out {
		index[h.Name] = i
	}
	for _, g := range gpus {
		if i, ok := index[g.Host]; ok {
			out[i].GPUs = append(out[i].GPUs, g)
		}
	}
	return out, nil
}

func scanGPU(row scanner) (fleet.GPU, error) {
	var g fleet.GPU
	var numa, group, total, num sql.NullInt64
	var vfs string
	if err := row.Scan(&g.Host, &g.Index, &g.Model, &g.MemoryBytes, &g.PCIAddress, &numa, &g.Driver, &group,
		&total, &num, &vfs); err != nil {
		return g, err
	}
	g.NUMANode, g.IOMMUGroup, g.SRIOVTotalVFs, g.SRIOVNumVFs = intPtr(numa), intPtr(group), intPtr(total), intPtr(num)
	var err error
	if g.VFs, err = fleet.DecodeVFs(vfs); err != nil {
		return g, fmt.Errorf("GPU %d of host %q: %w", g.Index, g.Host, err)
	}
	return g, nil
}
