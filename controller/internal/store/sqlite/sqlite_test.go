package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sluice-gpu/sluice/controller/internal/store/storetest"
)

// TestConformance runs the stores' shared suite on a new file per case.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.DB {
		path := filepath.Join(t.TempDir(), "c.db")
		return storetest.DB{Migrations: len(migrations), Open: func(t *testing.T) storetest.Store {
			t.Helper()
			s, err := Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}}
	})
}
