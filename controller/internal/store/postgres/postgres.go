// Package postgres is the controller's store on PostgreSQL (the pgx driver,
// pure Go): the same tables, semantics and schema versions as the SQLite
// store (controller/internal/store/sqlite), for several controllers behind
// one address sharing one database, so that the control plane has no single
// point of failure.
//
// Sharing is safe: usage intervals are keyed by host, VM and sequence number
// (a primary key, inserted with ON CONFLICT DO NOTHING), so the same
// interval pushed to two controllers at once is stored once; changes run in
// SERIALIZABLE transactions, retried when PostgreSQL reports a
// serialization failure or a deadlock; and the changes that read capacity
// and then place a VM hold a database-wide advisory lock (LockCapacity, see
// server.CapacityLocker) for their whole read-then-write, so two
// controllers never place into the same room. Migrations run under an
// advisory lock too: controllers starting together migrate once.
//
// Every change and its audit event are written in one transaction. Times
// are stored as Unix nanoseconds, UTC.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// Advisory lock keys (pg_advisory_xact_lock), the same in every controller.
const (
	migrationLock = 0x736c7563_0001 // "sluc", 1
	capacityLock  = 0x736c7563_0002
)

// Store is the controller's state in a PostgreSQL database. Its methods are
// safe for concurrent use, by this process and by other controllers on the
// same database.
type Store struct {
	db *sql.DB
}

// Open connects to the database at url (postgres://...) and brings its
// schema up to date.
func Open(ctx context.Context, url string) (*Store, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("opening the database: %w", err)
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(4)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrating the database: %w", err)
	}
	return s, nil
}

// Close closes the connections.
func (s *Store) Close() error { return s.db.Close() }

// SchemaVersion is the number of migrations applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

// migrate applies the missing migrations in one transaction that holds the
// migration lock, so controllers starting at once apply each version once.
func (s *Store) migrate(ctx context.Context) error {
	return s.tx(ctx, sql.LevelReadCommitted, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
			return fmt.Errorf("taking the migration lock: %w", err)
		}
		if _, err := tx.ExecContext(ctx,
			`CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied BIGINT NOT NULL)`); err != nil {
			return fmt.Errorf("creating schema_migrations: %w", err)
		}
		var have int
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
			return fmt.Errorf("reading the schema version: %w", err)
		}
		if have > len(migrations) {
			return fmt.Errorf("the database has schema version %d, newer than this controller's %d", have, len(migrations))
		}
		for v := have + 1; v <= len(migrations); v++ {
			if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("applying migration %d: %w", v, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied) VALUES ($1, $2)`, v, time.Now().UnixNano()); err != nil {
				return fmt.Errorf("recording migration %d: %w", v, err)
			}
		}
		return nil
	})
}

// LockCapacity takes the database-wide capacity lock (server.CapacityLocker):
// a transaction holding an advisory lock, released by unlock or, should
// this controller die, by PostgreSQL when the connection drops.
func (s *Store) LockCapacity(ctx context.Context) (unlock func(), err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("beginning the lock's transaction: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(capacityLock)); err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("waiting for the capacity lock: %w", err)
	}
	return func() { tx.Rollback() }, nil
}

// maxAttempts bounds the retries of a transaction that PostgreSQL aborted
// for a serialization failure or a deadlock.
const maxAttempts = 20

// tx runs fn in a transaction at level, committed when fn returns nil, and
// runs it again (fn must be repeatable) when PostgreSQL aborts it for a
// serialization failure or a deadlock.
func (s *Store) tx(ctx context.Context, level sql.IsolationLevel, fn func(*sql.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.try(ctx, level, fn)
		if err == nil || !retryable(err) || attempt == maxAttempts {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(rand.IntN(attempt*2)+1) * time.Millisecond):
		}
	}
}

func (s *Store) try(ctx context.Context, level sql.IsolationLevel, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
	if err != nil {
		return fmt.Errorf("beginning a transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// SQLSTATEs.
const (
	serializationFailure = "40001"
	deadlockDetected     = "40P01"
	uniqueViolation      = "23505"
	foreignKeyViolation  = "23503"
)

// sqlState is err's SQLSTATE, "" if it is not PostgreSQL's.
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func retryable(err error) bool {
	c := sqlState(err)
	return c == serializationFailure || c == deadlockDetected
}

// change runs fn in a SERIALIZABLE transaction (retried on conflicts).
func (s *Store) change(ctx context.Context, fn func(*sql.Tx) error) error {
	return s.tx(ctx, sql.LevelSerializable, fn)
}

func insertEvent(ctx context.Context, tx *sql.Tx, ev fleet.Event) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO events (time, actor, action, target, detail) VALUES ($1, $2, $3, $4, $5)`,
		nanos(ev.Time), ev.Actor, ev.Action, ev.Target, ev.Detail)
	if err != nil {
		return fmt.Errorf("recording event %s: %w", ev.Action, err)
	}
	return nil
}

// AddEvent records an event on its own.
func (s *Store) AddEvent(ctx context.Context, ev fleet.Event) error {
	return s.change(ctx, func(tx *sql.Tx) error { return insertEvent(ctx, tx, ev) })
}

// ListEvents returns up to limit events at or after since, newest first.
func (s *Store) ListEvents(ctx context.Context, since time.Time, limit int) ([]fleet.Event, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, time, actor, action, target, detail FROM events
		WHERE time >= $1 ORDER BY id DESC LIMIT $2`, nanos(since), limit)
	if err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	defer rows.Close()
	var out []fleet.Event
	for rows.Next() {
		var ev fleet.Event
		var t int64
		if err := rows.Scan(&ev.ID, &t, &ev.Actor, &ev.Action, &ev.Target, &ev.Detail); err != nil {
			return nil, fmt.Errorf("reading an event: %w", err)
		}
		ev.Time = fromNanos(t)
		out = append(out, ev)
	}
	return out, rows.Err()
}

// nanos is t as stored: Unix nanoseconds, 0 for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// notFound maps sql.ErrNoRows to fleet.ErrNotFound, naming what.
func notFound(err error, what string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, fleet.ErrNotFound)
	}
	return fmt.Errorf("reading %s: %w", what, err)
}
