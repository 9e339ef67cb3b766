// Package httpapitest serves a real control plane's REST API on a test database, wired as
// serve wires it, for the tests of the API's own clients (flags as code, the PostHog
// importer): they talk to it over HTTP on 127.0.0.1 as they would to a deployed control
// plane. The calling package's TestMain must run pgtest.Main.
package httpapitest

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane/flageval"
	"github.com/flagedge/flagedge/controlplane/httpapi"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/rollout"
	"github.com/flagedge/flagedge/internal/pgtest"
)

// API is a served REST API and what a client needs to use it.
type API struct {
	DB        *postgres.DB
	URL       string // the server's base URL
	Key       string // the bootstrapped admin's personal key, scope *
	ProjectID int64  // the bootstrapped project
}

// Serve bootstraps an admin and a project on a fresh database and serves the API on
// 127.0.0.1 until the test ends.
func Serve(t testing.TB) *API {
	t.Helper()
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	res, err := postgres.Bootstrap(ctx, db, bcrypt.MinCost, "admin@example.com", "")
	if err != nil {
		t.Fatal(err)
	}
	persons := postgres.NewPersonStore(db)
	sessions := postgres.NewEdgeSessionStore(db)
	api := httpapi.New(httpapi.Config{
		Services:  postgres.NewServices(db, bcrypt.MinCost),
		Evaluator: &flageval.Evaluator{Snapshots: postgres.NewSnapshotStore(db), Persons: persons, Scanner: persons},
		Ready:     db.Ping, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		EdgeSessions: sessions, Rollout: rollout.New(sessions), Usage: postgres.NewEvaluationStore(db),
	})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return &API{DB: db, URL: srv.URL, Key: res.PersonalAPIKey, ProjectID: res.ProjectID}
}
