package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

func events(projectID int64, n, users int, seed int) []controlplane.Event {
	out := make([]controlplane.Event, n)
	now := time.Now()
	for i := range out {
		props := map[string]any{"$current_url": "https://shop.example.com/p/42", "$browser": "Chrome", "n": i}
		name := "$pageview"
		if i%50 == 0 {
			name, props["$set"] = "$identify", map[string]any{"plan": "pro", "seen": i}
		}
		raw, _ := json.Marshal(props)
		out[i] = controlplane.Event{UUID: uuid.NewString(), ProjectID: projectID, Name: name,
			DistinctID: fmt.Sprintf("user-%d-%d", seed%7, i%users), Properties: raw, Timestamp: now, ReceivedAt: now}
	}
	return out
}

func TestIngestDeduplicates(t *testing.T) {
	t.Parallel()
	db, res, _ := mustOpen(t)
	store := postgres.NewEventStore(db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	batch := controlplane.EventBatch{ProjectID: res.ProjectID, Events: events(res.ProjectID, 300, 40, 1)}
	batch.Events = append(batch.Events, batch.Events[0]) // a uuid repeated within the batch
	got, err := store.Ingest(context.Background(), []controlplane.EventBatch{batch})
	if err != nil {
		t.Fatal(err)
	}
	if got.Stored != 300 || got.Duplicates != 1 {
		t.Errorf("first delivery: %+v", got)
	}
	again, err := store.Ingest(context.Background(), []controlplane.EventBatch{batch})
	if err != nil {
		t.Fatal(err)
	}
	if again.Stored != 0 || again.Duplicates != 301 {
		t.Errorf("redelivery: %+v", again)
	}
	var persons, ids int
	if err := db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM persons), (SELECT count(*) FROM person_distinct_ids)`).Scan(&persons, &ids); err != nil {
		t.Fatal(err)
	}
	if persons != 40 || ids != 40 {
		t.Errorf("%d persons and %d distinct ids for 40 users", persons, ids)
	}
}

// BenchmarkIngest stores batches of 1,000 SDK-shaped events (200 users; one in fifty an
// $identify with $set, one in ten a $feature_flag_called answering one of ten flags, one in
// twenty-five an $exception, the rest $pageviews with a duration) in a real PostgreSQL: what
// the control plane sustains from its edges. A micro-benchmark of the store alone. Its
// sub-benchmarks ingest into a project with no release plan (plans=0: what every project
// without one pays for plans existing at all) and with ten running on those flags (plans=10,
// each guarded by $exception per user and the mean $pageview duration: the cost of counting
// for them). Ingestion keeps its set of projects with active plans by LISTEN, as serve does.
//
// plan-read is the read of the project's active plans (none) that every batch made before
// ingestion kept its set of projects with plans, in a transaction, on its own.
func BenchmarkIngest(b *testing.B) {
	for _, plans := range []int{0, 10} {
		b.Run(fmt.Sprintf("plans=%d", plans), func(b *testing.B) { benchmarkIngest(b, plans) })
	}
	b.Run("plan-read", func(b *testing.B) {
		db, res, _ := mustOpen(b)
		batch := sdkEvents(res.ProjectID, 1000, 200, 0)
		tx, err := db.Pool.Begin(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		defer tx.Rollback(context.Background()) //nolint:errcheck // read only
		for b.Loop() {
			if err := postgres.CountForPlans(context.Background(), db, tx, res.ProjectID, batch); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchmarkIngest(b *testing.B, plans int) {
	db, res, url := mustOpen(b)
	store := postgres.NewEventStore(db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := controlplane.NewContextWithUser(context.Background(), &mustKey(b, db, res.PersonalAPIKey).User)
	flagStore, planStore := postgres.NewFlagService(db), postgres.NewReleasePlanStore(db)
	for i := range plans {
		f, err := flagStore.CreateFlag(ctx, res.ProjectID, controlplane.FlagUpdate{Key: ptr(fmt.Sprintf("bench-%d", i)),
			Filters: json.RawMessage(`{"groups": [{"properties": [], "rollout_percentage": 0}]}`)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := planStore.CreateReleasePlan(ctx, res.ProjectID, f.ID, controlplane.NewReleasePlan{
			Steps: []controlplane.ReleaseStep{{RolloutPercentage: 50, MinDurationSeconds: 86400}},
			Guardrails: []controlplane.Guardrail{{Event: "$exception"},
				{Event: "$pageview", Property: "$duration", Stat: controlplane.StatMean}}}); err != nil {
			b.Fatal(err)
		}
	}
	keepActivePlans(b, store, url)
	batches := make([][]controlplane.Event, b.N)
	for i := range batches {
		batches[i] = sdkEvents(res.ProjectID, 1000, 200, i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := store.Ingest(context.Background(), []controlplane.EventBatch{{ProjectID: res.ProjectID, Events: batches[i]}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
}

// sdkEvents is a batch as PostHog's SDKs send it: events() with one event in ten a
// $feature_flag_called for one of the flags bench-0 to bench-9 (answering true for half the
// users) and one in twenty-five an $exception; $pageviews carry a $duration.
func sdkEvents(projectID int64, n, users int, seed int) []controlplane.Event {
	out := events(projectID, n, users, seed)
	for i := range out {
		e := &out[i]
		switch {
		case e.Name == "$identify":
		case i%10 == 5:
			props, _ := json.Marshal(map[string]any{"$feature_flag": fmt.Sprintf("bench-%d", i/10%10),
				"$feature_flag_response": (i%users)%2 == 0})
			e.Name, e.Properties = "$feature_flag_called", props
		case i%25 == 7:
			e.Name, e.Properties = "$exception", json.RawMessage(`{"$exception_type": "TypeError"}`)
		default:
			e.Properties = json.RawMessage(fmt.Sprintf(`{"$current_url": "https://shop.example.com/p/42", "$duration": %d}`, 100+i%400))
		}
	}
	return out
}
