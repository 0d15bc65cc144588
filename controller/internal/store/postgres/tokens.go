package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

const tokenColumns = `id, name, role, tenant, host, hash, created, created_by, revoked`

func scanToken(row interface{ Scan(...any) error }) (fleet.Token, error) {
	var t fleet.Token
	var role string
	var created, revoked int64
	err := row.Scan(&t.ID, &t.Name, &role, &t.Tenant, &t.Host, &t.Hash, &created, &t.CreatedBy, &revoked)
	t.Role, t.Created, t.Revoked = fleet.Role(role), fromNanos(created), fromNanos(revoked)
	return t, err
}

// CreateToken stores t (its hash, never a secret) and ev.
func (s *Store) CreateToken(ctx context.Context, t fleet.Token, ev fleet.Event) error {
	return s.change(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO tokens (`+tokenColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0)`,
			t.ID, t.Name, string(t.Role), t.Tenant, t.Host, t.Hash, nanos(t.Created), t.CreatedBy)
		if err != nil {
			return fmt.Errorf("storing token %s: %w", t.ID, err)
		}
		return insertEvent(ctx, tx, ev)
	})
}

// TokenByHash returns the token whose secret hashes to hash, revoked or not.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (fleet.Token, error) {
	t, err := scanToken(s.db.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = $1`, hash))
	if err != nil {
		return t, notFound(err, "token")
	}
	return t, nil
}

// ListTokens returns every token, oldest first.
func (s *Store) ListTokens(ctx context.Context) ([]fleet.Token, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+tokenColumns+` FROM tokens ORDER BY created, id`)
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %w", err)
	}
	defer rows.Close()
	var out []fleet.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("reading a token: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// CountTokens returns how many tokens exist, revoked ones included.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM tokens`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting tokens: %w", err)
	}
	return n, nil
}

// RevokeToken marks token id revoked at at and records ev; a token revoked
// already keeps its first revocation and no event is added.
func (s *Store) RevokeToken(ctx context.Context, id string, at time.Time, ev fleet.Event) error {
	return s.change(ctx, func(tx *sql.Tx) error {
		var revoked int64
		if err := tx.QueryRowContext(ctx, `SELECT revoked FROM tokens WHERE id = $1`, id).Scan(&revoked); err != nil {
			return notFound(err, fmt.Sprintf("token %q", id))
		}
		if revoked != 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE tokens SET revoked = $1 WHERE id = $2`, nanos(at), id); err != nil {
			return fmt.Errorf("revoking token %s: %w", id, err)
		}
		return insertEvent(ctx, tx, ev)
	})
}
