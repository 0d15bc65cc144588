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
// The queries are the shared store's (controller/internal/store/sqlstore);
// this package opens the connection and holds PostgreSQL's dialect, schema
// and capacity lock.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"

	"github.com/sluice-gpu/sluice/controller/internal/store/sqlstore"
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
	*sqlstore.Store
}

// dialect is PostgreSQL's SQL: numbered placeholders, GREATEST,
// SERIALIZABLE changes retried on a serialization failure or a deadlock,
// and migration under an advisory lock.
var dialect = sqlstore.Dialect{
	Numbered:      true,
	Greatest:      "GREATEST",
	Serializable:  true,
	Classify:      classify,
	MigrationLock: fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", int64(migrationLock)),
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
	s, err := sqlstore.Open(ctx, db, dialect, migrations)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrating the database: %w", err)
	}
	return &Store{s}, nil
}

// LockCapacity takes the database-wide capacity lock (server.CapacityLocker):
// a transaction holding an advisory lock, released by unlock or, should
// this controller die, by PostgreSQL when the connection drops.
func (s *Store) LockCapacity(ctx context.Context) (unlock func(), err error) {
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("beginning the lock's transaction: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(capacityLock)); err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("waiting for the capacity lock: %w", err)
	}
	return func() { tx.Rollback() }, nil
}

// SQLSTATEs.
const (
	serializationFailure = "40001"
	deadlockDetected     = "40P01"
	uniqueViolation      = "23505"
	foreignKeyViolation  = "23503"
)

// classify reads PostgreSQL's SQLSTATE.
func classify(err error) sqlstore.ErrorClass {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return sqlstore.Other
	}
	switch pe.Code {
	case uniqueViolation:
		return sqlstore.UniqueViolation
	case foreignKeyViolation:
		return sqlstore.ForeignKeyFailure
	case serializationFailure, deadlockDetected:
		return sqlstore.Retry
	}
	return sqlstore.Other
}
