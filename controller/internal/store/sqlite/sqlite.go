// Package sqlite is the controller's store on SQLite, embedded and pure Go
// (modernc.org/sqlite, no cgo), in one file: the shared store
// (controller/internal/store/sqlstore) with SQLite's dialect and schema.
//
// It is for one controller: its transactions begin IMMEDIATE, so two
// processes on one file corrupt nothing, but it is no CapacityLocker. The
// schema is versioned (migrations.go, table schema_migrations); Open applies
// the missing versions.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	driver "modernc.org/sqlite" // the database/sql driver "sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sluice-gpu/sluice/controller/internal/store/sqlstore"
)

// Store is the controller's state in a SQLite file. Its methods are safe for
// concurrent use; writes are serialised by one connection.
type Store struct {
	*sqlstore.Store
}

// dialect is SQLite's SQL: ? placeholders, the scalar MAX, and the
// transactions' defaults (serialised: one connection, begun IMMEDIATE).
var dialect = sqlstore.Dialect{Greatest: "MAX", Classify: classify}

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
	s, err := sqlstore.Open(ctx, db, dialect, migrations)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrating %s: %w", path, err)
	}
	return &Store{s}, nil
}

// classify reads SQLite's extended result codes.
func classify(err error) sqlstore.ErrorClass {
	var se *driver.Error
	if !errors.As(err, &se) {
		return sqlstore.Other
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return sqlstore.UniqueViolation
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return sqlstore.ForeignKeyFailure
	}
	return sqlstore.Other
}
