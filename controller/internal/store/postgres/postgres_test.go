package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/sluice-gpu/sluice/controller/internal/store/storetest"
	"github.com/sluice-gpu/sluice/internal/pgtest"
	"github.com/sluice-gpu/sluice/internal/testdeps"
)

// pgServer is the throwaway PostgreSQL server of this package's tests; nil
// with startErr when none could be started.
var (
	pgServer *pgtest.Server
	startErr error
)

func TestMain(m *testing.M) {
	pgServer, startErr = pgtest.Start(context.Background())
	code := m.Run()
	if pgServer != nil {
		if err := pgServer.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the test PostgreSQL server:", err)
		}
	}
	os.Exit(code)
}

// newDatabase returns the URL of a new, empty database on the test server.
// Without PostgreSQL's binaries it fails the test (internal/testdeps).
func newDatabase(t *testing.T) string {
	t.Helper()
	if errors.Is(startErr, pgtest.ErrNotInstalled) {
		testdeps.Missing(t, "postgresql", startErr.Error())
	}
	if startErr != nil {
		t.Fatalf("the test PostgreSQL server did not start: %v", startErr)
	}
	url, err := pgServer.CreateDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return url
}

func open(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the stores' shared suite on a new database per case.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.DB {
		url := newDatabase(t)
		return storetest.DB{Migrations: len(migrations), Open: func(t *testing.T) storetest.Store { return open(t, url) }}
	})
}

// Controllers that start at once on an empty database migrate it once.
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	url := newDatabase(t)
	errc := make(chan error, 4)
	for range 4 {
		go func() {
			s, err := Open(context.Background(), url)
			if err == nil {
				s.Close()
			}
			errc <- err
		}()
	}
	for range 4 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	s := open(t, url)
	var rows int
	if err := s.DB().QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&rows); err != nil || rows != len(migrations) {
		t.Fatalf("%d rows in schema_migrations, %v; want %d", rows, err, len(migrations))
	}
}
