// Package sqlstore is the controller's store written once for the SQL
// databases it runs on: tokens (hashed), hosts and their GPUs, VMs, usage
// intervals and the audit log, over database/sql. The packages of the
// databases (controller/internal/store/sqlite, .../postgres) open the
// connection, hold their schema's migrations and describe their SQL in a
// Dialect: placeholders, the few functions whose names differ, transaction
// isolation, and what a driver's error means.
//
// Every change and the audit event that records it are written in one
// transaction, so the log never misses a change nor names one that did not
// happen. Usage intervals are keyed by host, VM and sequence number
// (inserted ON CONFLICT DO NOTHING): a redelivered interval is counted
// once, whatever happened in between (restarts, another controller on the
// same database). Times are stored as Unix nanoseconds, UTC, 0 for none.
//
// The SQL here is written with ? placeholders; a Dialect that numbers them
// ($1, $2, ...) gets them rewritten.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// Dialect is what differs between the databases.
type Dialect struct {
	// Numbered: placeholders are $1, $2, ... (PostgreSQL) rather than ?.
	Numbered bool
	// Greatest is the function that returns the largest of its arguments
	// (MAX in SQLite, GREATEST in PostgreSQL).
	Greatest string
	// Serializable: changes run SERIALIZABLE, and usage ingestion and
	// migration (which rely on their keys and locks instead) READ
	// COMMITTED. Otherwise every transaction takes the driver's default.
	Serializable bool
	// Classify says what a driver's error means; nil: nothing known.
	Classify func(error) ErrorClass
	// MigrationLock, if not "", is run first in the migration's
	// transaction: a lock that stores opening the database at once take in
	// turn, so that each version is applied once.
	MigrationLock string
}

// ErrorClass is what a driver's error means to the store.
type ErrorClass int

// Error classes.
const (
	Other             ErrorClass = iota
	UniqueViolation              // a primary key or UNIQUE constraint failed
	ForeignKeyFailure            // a FOREIGN KEY constraint failed
	Retry                        // a serialization failure or deadlock: run the transaction again
)

func (d *Dialect) class(err error) ErrorClass {
	if d.Classify == nil || err == nil {
		return Other
	}
	return d.Classify(err)
}

// rebind rewrites q's ? placeholders (outside string literals) as $1, $2,
// ... for a dialect that numbers them.
func (d *Dialect) rebind(q string) string {
	if !d.Numbered {
		return q
	}
	var b strings.Builder
	n, quoted := 0, false
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// Store is the controller's state in a SQL database. Its methods are safe
// for concurrent use (and, where the dialect's transactions make it so, by
// other controllers on the same database).
type Store struct {
	db *sql.DB
	d  Dialect
}

// Open returns a store over db in dialect d, after bringing its schema up
// to date with migrations (applied in order, each once, with its row in
// schema_migrations). On an error db is left open.
func Open(ctx context.Context, db *sql.DB, d Dialect, migrations []string) (*Store, error) {
	s := &Store{db: db, d: d}
	if err := s.migrate(ctx, migrations); err != nil {
		return nil, err
	}
	return s, nil
}

// DB is the store's database.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// SchemaVersion is the number of migrations applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

// migrate applies the missing migrations in one transaction, which first
// takes the dialect's migration lock.
func (s *Store) migrate(ctx context.Context, migrations []string) error {
	return s.tx(ctx, s.batchLevel(), func(c conn) error {
		if s.d.MigrationLock != "" {
			if _, err := c.exec(ctx, s.d.MigrationLock); err != nil {
				return fmt.Errorf("taking the migration lock: %w", err)
			}
		}
		if _, err := c.exec(ctx,
			`CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied BIGINT NOT NULL)`); err != nil {
			return fmt.Errorf("creating schema_migrations: %w", err)
		}
		var have int
		if err := c.queryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
			return fmt.Errorf("reading the schema version: %w", err)
		}
		if have > len(migrations) {
			return fmt.Errorf("the database has schema version %d, newer than this controller's %d", have, len(migrations))
		}
		for v := have + 1; v <= len(migrations); v++ {
			if _, err := c.exec(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("applying migration %d: %w", v, err)
			}
			if _, err := c.exec(ctx, `INSERT INTO schema_migrations (version, applied) VALUES (?, ?)`, v, time.Now().UnixNano()); err != nil {
				return fmt.Errorf("recording migration %d: %w", v, err)
			}
		}
		return nil
	})
}

// conn runs SQL written with ? placeholders on a database or a transaction,
// in the store's dialect.
type conn struct {
	c interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
	d *Dialect
}

func (c conn) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return c.c.ExecContext(ctx, c.d.rebind(q), args...)
}

func (c conn) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return c.c.QueryContext(ctx, c.d.rebind(q), args...)
}

func (c conn) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	return c.c.QueryRowContext(ctx, c.d.rebind(q), args...)
}

// read is the store's database, for reads outside a transaction.
func (s *Store) read() conn { return conn{s.db, &s.d} }

// maxAttempts bounds the runs of a transaction that the database aborted
// for a serialization failure or a deadlock.
const maxAttempts = 20

// change runs fn in a transaction for a change: SERIALIZABLE where the
// dialect says so.
func (s *Store) change(ctx context.Context, fn func(conn) error) error {
	if s.d.Serializable {
		return s.tx(ctx, sql.LevelSerializable, fn)
	}
	return s.tx(ctx, sql.LevelDefault, fn)
}

// batchLevel is the isolation of usage ingestion and migration.
func (s *Store) batchLevel() sql.IsolationLevel {
	if s.d.Serializable {
		return sql.LevelReadCommitted
	}
	return sql.LevelDefault
}

// tx runs fn in a transaction at level, committed when fn returns nil, and
// runs it again (fn must be repeatable) when the database aborted it for a
// serialization failure or a deadlock.
func (s *Store) tx(ctx context.Context, level sql.IsolationLevel, fn func(conn) error) error {
	for attempt := 1; ; attempt++ {
		err := s.try(ctx, level, fn)
		if err == nil || s.d.class(err) != Retry || attempt == maxAttempts {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(rand.IntN(attempt*2)+1) * time.Millisecond):
		}
	}
}

func (s *Store) try(ctx context.Context, level sql.IsolationLevel, fn func(conn) error) error {
	var opts *sql.TxOptions
	if level != sql.LevelDefault {
		opts = &sql.TxOptions{Isolation: level}
	}
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("beginning a transaction: %w", err)
	}
	if err := fn(conn{tx, &s.d}); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// scanAll reads every row of a query's result (rows, err) with scan;
// doing ("listing tokens") and item ("a token") name them in errors.
func scanAll[T any](rows *sql.Rows, err error, doing, item string, scan func(scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", doing, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", item, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", doing, err)
	}
	return out, nil
}

// scanner is a row or rows.
type scanner interface{ Scan(...any) error }

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

// nullInt is an optional integer as a column: NULL when absent.
func nullInt(p *int) sql.NullInt64 {
	if p == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: int64(*p), Valid: true}
}

// intPtr is a nullable column as an optional integer.
func intPtr(n sql.NullInt64) *int {
	if !n.Valid {
		return nil
	}
	v := int(n.Int64)
	return &v
}
