package framework

import (
	"context"
	"fmt"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/sluice-gpu/sluice/internal/pgtest"
)

// StartPostgres starts a throwaway PostgreSQL server (internal/pgtest:
// Debian's initdb and pg_ctl, a UNIX socket in a temporary directory) and
// returns the URL of a new database on it; the server is stopped and
// removed when the spec ends. Without PostgreSQL the spec fails when
// SLUICE_REQUIRE_POSTGRES=1 (make e2e, CI) and is skipped otherwise.
func StartPostgres() string {
	ginkgo.GinkgoHelper()
	srv, err := pgtest.Start(context.Background())
	if err != nil {
		if pgtest.Required() {
			ginkgo.Fail(fmt.Sprintf("%s=1 and no PostgreSQL server could be started: %v", pgtest.RequireEnv, err))
		}
		ginkgo.Skip(fmt.Sprintf("no PostgreSQL (set %s=1 to fail instead): %v", pgtest.RequireEnv, err))
	}
	ginkgo.DeferCleanup(func() { gomega.Expect(srv.Stop()).To(gomega.Succeed()) })
	url, err := srv.CreateDatabase(context.Background())
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return url
}
