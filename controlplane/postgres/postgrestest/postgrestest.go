// Package postgrestest gives a test a database as the control plane's first start leaves it:
// migrated, with an admin and the admin's first project.
package postgrestest

import (
	"context"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/internal/pgtest"
)

// Open returns a new database of the test's cluster (internal/pgtest: the package's TestMain
// migrates it with postgres.Migrate) with admin@example.com and a first project bootstrapped
// (at bcrypt's lowest cost: tests log in often), closed when the test ends, and its URL for
// a control plane started on it.
func Open(tb testing.TB) (*postgres.DB, *postgres.BootstrapResult, string) {
	tb.Helper()
	url := pgtest.NewDatabase(tb)
	db, err := postgres.Open(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(db.Close)
	boot, err := postgres.Bootstrap(context.Background(), db, bcrypt.MinCost, "admin@example.com", "")
	if err != nil {
		tb.Fatal(err)
	}
	return db, boot, url
}
