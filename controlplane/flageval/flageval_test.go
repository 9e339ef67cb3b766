package flageval_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/flageval"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/postgres/postgrestest"
	"github.com/flagedge/flagedge/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, postgres.Migrate)) }

// newProject opens a fresh database with a bootstrapped project, and an evaluator on it.
func newProject(t *testing.T) (*postgres.DB, *postgres.BootstrapResult, *flageval.Evaluator) {
	t.Helper()
	db, boot, _ := postgrestest.Open(t)
	persons := postgres.NewPersonStore(db)
	return db, boot, &flageval.Evaluator{Snapshots: postgres.NewSnapshotStore(db), Persons: persons, Scanner: persons}
}

// TestCompileOncePerVersion: a project is compiled once per snapshot version, shared by the
// requests that follow, and compiled afresh when a change moves the version.
func TestCompileOncePerVersion(t *testing.T) {
	ctx := context.Background()
	db, boot, e := newProject(t)
	key, err := postgres.NewAuthService(db).AuthenticatePersonalKey(ctx, boot.PersonalAPIKey)
	if err != nil {
		t.Fatal(err)
	}

	first, err := e.Compile(ctx, boot.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.Compile(ctx, boot.ProjectID)
	if err != nil || again != first {
		t.Fatalf("a second compile of the same version built anew (%p, %p) %v", first, again, err)
	}
	k := "checkout"
	if _, err := postgres.NewFlagService(db).CreateFlag(controlplane.NewContextWithUser(ctx, &key.User), boot.ProjectID, controlplane.FlagUpdate{Key: &k}); err != nil {
		t.Fatal(err)
	}
	changed, err := e.Compile(ctx, boot.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	if changed == first || changed.Definition.Version <= first.Definition.Version || len(changed.Definition.Flags) != 1 {
		t.Fatalf("after a change: version %d (was %d), %d flags", changed.Definition.Version, first.Definition.Version, len(changed.Definition.Flags))
	}
	if _, err := e.Compile(ctx, boot.ProjectID+1000); controlplane.ErrorKind(err) != controlplane.NotFound {
		t.Errorf("compile of a project that does not exist: %v, want NotFound", err)
	}
}

// TestBlastRadiiOneScan: the reach of several conditions counted in one scan equals each
// condition's own count, and a limit stops the scan at that many persons, saying so.
func TestBlastRadiiOneScan(t *testing.T) {
	ctx := context.Background()
	db, boot, e := newProject(t)
	var events []controlplane.Event
	now := time.Now()
	for i := range 40 {
		domain := "example.com"
		if i%3 == 0 {
			domain = "elsewhere.org"
		}
		events = append(events, controlplane.Event{UUID: uuid.NewString(), Name: "$identify", DistinctID: fmt.Sprintf("user-%d", i),
			Properties: json.RawMessage(fmt.Sprintf(`{"$set": {"email": "u%d@%s"}}`, i, domain)), Timestamp: now, ReceivedAt: now})
	}
	if _, err := postgres.NewEventStore(db, slog.New(slog.NewTextHandler(io.Discard, nil))).Ingest(ctx,
		[]controlplane.EventBatch{{ProjectID: boot.ProjectID, Events: events}}); err != nil {
		t.Fatal(err)
	}
	p, err := e.Compile(ctx, boot.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	conditions := []json.RawMessage{
		json.RawMessage(`{"properties": [{"key": "email", "value": "example.com", "operator": "icontains", "type": "person"}], "rollout_percentage": 50}`),
		json.RawMessage(`{"properties": [], "rollout_percentage": 100}`),
		json.RawMessage(`"not a condition"`),
	}
	for _, flagKey := range []string{"checkout", ""} {
		all, err := e.BlastRadii(ctx, p, conditions, nil, flagKey, 0)
		if err != nil {
			t.Fatal(err)
		}
		if all.Total != 40 || !all.Complete || all.Errs[2] == nil {
			t.Fatalf("key %q: total %d, complete %v, errors %v", flagKey, all.Total, all.Complete, all.Errs)
		}
		for i, cond := range conditions[:2] {
			affected, total, err := e.BlastRadius(ctx, p, cond, nil, flagKey)
			if err != nil || affected != all.Affected[i] || total != 40 {
				t.Errorf("key %q, condition %d: alone %d of %d (%v), in one scan %d", flagKey, i, affected, total, err, all.Affected[i])
			}
		}
		if all.Affected[1] != 40 || all.Affected[0] == 0 || all.Affected[0] >= 26 {
			t.Errorf("key %q: reach %v of 40 (26 at example.com, half rolled out)", flagKey, all.Affected)
		}
	}
	for _, limit := range []int{1, 10, 39, 40, 41} {
		some, err := e.BlastRadii(ctx, p, conditions[1:2], nil, "checkout", limit)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(limit, 40); some.Total != want || some.Affected[0] != want || some.Complete != (limit >= 40) {
			t.Errorf("limit %d: %d scanned, %d reached, complete %v", limit, some.Total, some.Affected[0], some.Complete)
		}
	}
}
