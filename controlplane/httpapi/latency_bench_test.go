package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane/flageval"
	"github.com/flagedge/flagedge/controlplane/httpapi"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/rollout"
	"github.com/flagedge/flagedge/internal/pgtest"
)

// BenchmarkFlagAPI is a micro-benchmark (in process, over loopback HTTP, real PostgreSQL) of
// the management API's two commonest calls on a flag with two conditions: reading it and
// changing its rollout, as the admin's personal key.
func BenchmarkFlagAPI(b *testing.B) {
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(db.Close)
	res, err := postgres.Bootstrap(ctx, db, bcrypt.MinCost, "admin@example.com", "")
	if err != nil {
		b.Fatal(err)
	}
	persons, sessions := postgres.NewPersonStore(db), postgres.NewEdgeSessionStore(db)
	srv := httptest.NewServer(httpapi.New(httpapi.Config{
		Services:  postgres.NewServices(db, bcrypt.MinCost),
		Evaluator: &flageval.Evaluator{Snapshots: postgres.NewSnapshotStore(db), Persons: persons, Scanner: persons},
		Ready:     db.Ping, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		EdgeSessions: sessions, Rollout: rollout.New(sessions), Usage: postgres.NewEvaluationStore(db),
	}))
	b.Cleanup(srv.Close)
	call := func(method, path, body string, want int) {
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+res.PersonalAPIKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
		}
	}
	flags := fmt.Sprintf("/api/projects/%d/feature_flags/", res.ProjectID)
	call("POST", flags, `{"key": "bench", "filters": {"groups": [{"properties": [{"key": "email", "value": "@example.com",
		"operator": "icontains", "type": "person"}], "rollout_percentage": 50}, {"properties": [], "rollout_percentage": 10}]}}`, 201)
	flag := flags + "1/"
	b.Run("GET", func(b *testing.B) {
		for range b.N {
			call("GET", flag, "", 200)
		}
	})
	b.Run("PATCH", func(b *testing.B) {
		for i := range b.N {
			call("PATCH", flag, fmt.Sprintf(`{"filters": {"groups": [{"properties": [{"key": "email", "value": "@example.com",
				"operator": "icontains", "type": "person"}], "rollout_percentage": %d}, {"properties": [], "rollout_percentage": 10}]}}`, 20+i%2), 200)
		}
	})
}
