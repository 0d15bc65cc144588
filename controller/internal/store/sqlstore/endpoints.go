package sqlstore

import (
	"context"
	"fmt"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// MigrationEndpoints is the stores' schema version 4, the same SQL in
// every dialect: the endpoints the hosts report of their VMs. Never change
// it: it has shipped.
const MigrationEndpoints = `CREATE TABLE endpoints (
	host TEXT NOT NULL REFERENCES hosts(name),
	vm TEXT NOT NULL,
	report TEXT NOT NULL,
	PRIMARY KEY (host, vm)
);`

// SetEndpoints replaces what host reported of its VMs' endpoints
// (one per VM; fleet.ErrNotFound for an unknown host). They are the host's run-time
// state, reported every interval: no audit event is recorded, and a report
// equal to what is stored writes nothing.
func (s *Store) SetEndpoints(ctx context.Context, host string, eps []fleet.Endpoint) error {
	return s.change(ctx, func(c conn) error {
		var one int
		if err := c.queryRow(ctx, `SELECT 1 FROM hosts WHERE name = ?`, host).Scan(&one); err != nil {
			return notFound(err, fmt.Sprintf("host %q", host))
		}
		rows, err := c.query(ctx, `SELECT host, vm, report FROM endpoints WHERE host = ?`, host)
		stored, err := scanAll(rows, err, fmt.Sprintf("listing the endpoints of host %q", host), "an endpoint", scanEndpoint)
		if err != nil {
			return err
		}
		if sameEndpoints(stored, eps) {
			return nil
		}
		if _, err := c.exec(ctx, `DELETE FROM endpoints WHERE host = ?`, host); err != nil {
			return fmt.Errorf("replacing the endpoints of host %q: %w", host, err)
		}
		for _, ep := range eps {
			if _, err := c.exec(ctx, `INSERT INTO endpoints (host, vm, report) VALUES (?, ?, ?)`, host, ep.VM, ep.Report); err != nil {
				if s.d.class(err) == ForeignKeyFailure { // the host deleted since
					return fmt.Errorf("host %q: %w", host, fleet.ErrNotFound)
				}
				return fmt.Errorf("storing the endpoint of vm %q on host %q: %w", ep.VM, host, err)
			}
		}
		return nil
	})
}

// sameEndpoints reports whether a and b hold the same reports by VM.
func sameEndpoints(a, b []fleet.Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	reports := make(map[string]string, len(a))
	for _, ep := range a {
		reports[ep.VM] = ep.Report
	}
	for _, ep := range b {
		if r, ok := reports[ep.VM]; !ok || r != ep.Report {
			return false
		}
	}
	return true
}

// Endpoint returns what host last reported of VM vm's endpoint;
// fleet.ErrNotFound if it has not.
func (s *Store) Endpoint(ctx context.Context, host, vm string) (fleet.Endpoint, error) {
	ep, err := scanEndpoint(s.read().queryRow(ctx, `SELECT host, vm, report FROM endpoints WHERE host = ? AND vm = ?`, host, vm))
	if err != nil {
		return ep, notFound(err, fmt.Sprintf("the endpoint of vm %q on host %q", vm, host))
	}
	return ep, nil
}

func scanEndpoint(row scanner) (fleet.Endpoint, error) {
	var ep fleet.Endpoint
	err := row.Scan(&ep.Host, &ep.VM, &ep.Report)
	return ep, err
}
