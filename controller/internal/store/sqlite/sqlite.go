// Package sqlite is the controller's store on SQLite, embedded and pure Go
// (modernc.org/sqlite, no cgo): tokens (hashed), hosts and their GPUs, VMs,
// usage intervals and the audit log, in one file.
//
// Every change and the audit event that records it are written in one
// transaction, so the log never misses a change nor names one that did not
// happen. Usage intervals are keyed by host, VM and sequence number: a
// redelivered interval is counted once, whatever happened in between
// (restarts included). Times are stored as Unix nanoseconds, UTC.
//
// The schema is versioned (migrations.go, table schema_migrations); Open
// applies the missing versions.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// Store is the controller's state in a SQLite file. Its methods are safe for
// concurrent use; writes are serialised by one connection.
type Store struct {
	db *sql.DB
}

// Open opens (creating it if need be) the database at path and brings its
// schema up to date.
func Open(ctx context.Context, path string) (*Store, error) {
	q := url.Values{}
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)") // usage is billing data: durable at commit
	// Transactions take the write lock when they begin: one that read and
	// then wrote could not upgrade its lock past another process's commit
	// (SQLITE_BUSY at once, whatever the busy timeout).
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	// One connection: SQLite has one writer anyway, and this way no
	// transaction waits on a lock another connection of ours holds.
	db.SetMaxOpenConns(1)
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrating %s: %w", path, err)
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// SchemaVersion is the number of migrations applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx,
		`CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	have, err := s.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("reading the schema version: %w", err)
	}
	if have > len(migrations) {
		return fmt.Errorf("the database has schema version %d, newer than this controller's %d", have, len(migrations))
	}
	for v := have + 1; v <= len(migrations); v++ {
		err := s.tx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied) VALUES (?, ?)`, v, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("applying migration %d: %w", v, err)
		}
	}
	return nil
}

// tx runs fn in a transaction, committed when fn returns nil.
func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
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

func insertEvent(ctx context.Context, tx *sql.Tx, ev fleet.Event) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO events (time, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)`,
		nanos(ev.Time), ev.Actor, ev.Action, ev.Target, ev.Detail)
	if err != nil {
		return fmt.Errorf("recording event %s: %w", ev.Action, err)
	}
	return nil
}

// AddEvent records an event on its own.
func (s *Store) AddEvent(ctx context.Context, ev fleet.Event) error {
	return s.tx(ctx, func(tx *sql.Tx) error { return insertEvent(ctx, tx, ev) })
}

// ListEvents returns up to limit events at or after since, newest first.
func (s *Store) ListEvents(ctx context.Context, since time.Time, limit int) ([]fleet.Event, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, time, actor, action, target, detail FROM events
		WHERE time >= ? ORDER BY id DESC LIMIT ?`, nanos(since), limit)
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
