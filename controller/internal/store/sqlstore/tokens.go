package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

const tokenColumns = `id, name, role, tenant, host, hash, created, created_by, revoked`

func scanToken(row scanner) (fleet.Token, error) {
	var t fleet.Token
	var role string
	var created, revoked int64
	err := row.Scan(&t.ID, &t.Name, &role, &t.Tenant, &t.Host, &t.Hash, &created, &t.CreatedBy, &revoked)
	t.Role, t.Created, t.Revoked = fleet.Role(role), fromNanos(created), fromNanos(revoked)
	return t, err
}

// CreateToken stores t (its hash, never a secret) and ev.
func (s *Store) CreateToken(ctx context.Context, t fleet.Token, ev fleet.Event) error {
	return s.change(ctx, func(c conn) error {
		_, err := c.exec(ctx, `INSERT INTO tokens (`+tokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)`,
			t.ID, t.Name, string(t.Role), t.Tenant, t.Host, t.Hash, nanos(t.Created), t.CreatedBy)
		if err != nil {
			return fmt.Errorf("storing token %s: %w", t.ID, err)
		}
		return insertEvent(ctx, c, ev)
	})
}

// TokenByHash returns the token whose secret hashes to hash, revoked or not.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (fleet.Token, error) {
	t, err := scanToken(s.read().queryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = ?`, hash))
	if err != nil {
		return t, notFound(err, "token")
	}
	return t, nil
}

// ListTokens returns every token, oldest first.
func (s *Store) ListTokens(ctx context.Context) ([]fleet.Token, error) {
	rows, err := s.read().query(ctx, `SELECT `+tokenColumns+` FROM tokens ORDER BY created, id`)
	return scanAll(rows, err, "listing tokens", "a token", scanToken)
}

// CountTokens returns how many tokens exist, revoked ones included.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	var n int
	if err := s.read().queryRow(ctx, `SELECT COUNT(*) FROM tokens`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting tokens: %w", err)
	}
	return n, nil
}

// RevokeToken marks token id revoked at at and records ev; a token revoked
// already keeps its first revocation and no event is added.
func (s *Store) RevokeToken(ctx context.Context, id string, at time.Time, ev fleet.Event) error {
	return s.change(ctx, func(c conn) error {
		var revoked int64
		if err := c.queryRow(ctx, `SELECT revoked FROM tokens WHERE id = ?`, id).Scan(&revoked); err != nil {
			return notFound(err, fmt.Sprintf("token %q", id))
		}
		if revoked != 0 {
			return nil
		}
		if _, err := c.exec(ctx, `UPDATE tokens SET revoked = ? WHERE id = ?`, nanos(at), id); err != nil {
			return fmt.Errorf("revoking token %s: %w", id, err)
		}
		return insertEvent(ctx, c, ev)
	})
}
