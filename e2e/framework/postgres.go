package framework

import (
	"context"
	"errors"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/sluice-gpu/sluice/internal/pgtest"
	"github.com/sluice-gpu/sluice/internal/testdeps"
)

// StartPostgres starts a throwaway PostgreSQL server (internal/pgtest:
// Debian's initdb and pg_ctl, a UNIX socket in a temporary directory) and
// returns the URL of a new database on it; the server is stopped and
// removed when the spec ends. Without PostgreSQL the spec fails
// (internal/testdeps).
func StartPostgres() string {
	ginkgo.GinkgoHelper()
	srv, err := pgtest.Start(context.Background())
	if errors.Is(err, pgtest.ErrNotInstalled) {
		testdeps.Missing(specTB{}, "postgresql", err.Error())
	}
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "starting PostgreSQL")
	ginkgo.DeferCleanup(func() { gomega.Expect(srv.Stop()).To(gomega.Succeed()) })
	url, err := srv.CreateDatabase(context.Background())
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return url
}
