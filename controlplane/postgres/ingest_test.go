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

// BenchmarkIngest stores batches of 1,000 events (200 users, one in fifty an $identify with
// $set) in a real PostgreSQL: what the control plane sustains from its edges.
func BenchmarkIngest(b *testing.B) {
	db, res, _ := mustOpen(b)
	store := postgres.NewEventStore(db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	batches := make([][]controlplane.Event, b.N)
	for i := range batches {
		batches[i] = events(res.ProjectID, 1000, 200, i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := store.Ingest(context.Background(), []controlplane.EventBatch{{ProjectID: res.ProjectID, Events: batches[i]}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
}
