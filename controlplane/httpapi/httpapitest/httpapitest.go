// Package httpapitest serves a real control plane's REST API on a test database, wired as
// serve wires it, for the API's own tests and those of its clients (flags as code, the
// PostHog importer): they talk to it over HTTP on 127.0.0.1 as they would to a deployed
// control plane. The calling package's TestMain must run pgtest.Main.
package httpapitest

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane/flageval"
	"github.com/flagedge/flagedge/controlplane/forward"
	"github.com/flagedge/flagedge/controlplane/httpapi"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/postgres/postgrestest"
	"github.com/flagedge/flagedge/controlplane/rollout"
	"github.com/flagedge/flagedge/controlplane/webhook"
)

// API is a served REST API and what a client needs to use it.
type API struct {
	DB        *postgres.DB
	Server    *httpapi.Server
	HTTP      *httptest.Server
	URL       string // the server's base URL
	Key       string // the bootstrapped admin's personal key, scope *
	ProjectID int64  // the bootstrapped project
	Token     string // its project API key
}

// Serve bootstraps an admin and a project on a fresh database and serves the API on
// 127.0.0.1 until the test ends.
func Serve(t testing.TB) *API {
	t.Helper()
	db, res, _ := postgrestest.Open(t)
	persons := postgres.NewPersonStore(db)
	sessions := postgres.NewEdgeSessionStore(db)
	stores := postgres.NewServices(db, bcrypt.MinCost)
	stores.Webhooks = webhook.Checked(stores.Webhooks, &webhook.Policy{}) // as serve wires it, without --webhook-allow-private
	stores.EventDestinations = forward.Checked(stores.EventDestinations, &webhook.Policy{})
	api := httpapi.New(httpapi.Config{
		Services:  stores,
		Evaluator: &flageval.Evaluator{Snapshots: postgres.NewSnapshotStore(db), Persons: persons, Scanner: persons},
		Ready:     db.Ping, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		EdgeSessions: sessions, Rollout: rollout.New(sessions), Usage: postgres.NewEvaluationStore(db),
	})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return &API{DB: db, Server: api, HTTP: srv, URL: srv.URL, Key: res.PersonalAPIKey, ProjectID: res.ProjectID, Token: res.ProjectAPIKey}
}
