package postgres_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// poison is an event PostgreSQL refuses for its content, and the SQLSTATE it gives.
type poison struct {
	name  string
	event controlplane.Event
	code  string
}

// poisonEvents are one of each input that used to fail a whole batch (and so, retried by
// the edge for ever, every later event of the edge).
func poisonEvents(now time.Time) []poison {
	long := incompressible(5000)
	ev := func(name, distinctID, props string) controlplane.Event {
		return controlplane.Event{UUID: uuid.NewString(), Name: name, DistinctID: distinctID, Properties: json.RawMessage(props),
			Timestamp: now, ReceivedAt: now}
	}
	past := ev("$pageview", "u-past", `{}`)
	past.Timestamp = time.UnixMicro(-1000000000000000 * 1000) // -1e15 ms, long before 4713 BC
	return []poison{
		{"NUL in a property value", ev("$pageview", "u1", `{"a":"x\u0000y"}`), "22P05"},
		{"NUL in a property key", ev("$pageview", "u1", `{"a\u0000":"x"}`), "22P05"},
		{"NUL in $set", ev("$identify", "u1", `{"$set":{"email":"a\u0000b"}}`), "22P05"},
		{"NUL in distinct_id", ev("$pageview", "u\x00", `{}`), "22021"},
		{"NUL in the event name", ev("ev\x00nt", "u1", `{}`), "22021"},
		{"raw 0xff in a property", ev("$pageview", "u1", "{\"a\":\"\xff\"}"), "22021"},
		{"raw 0xff in distinct_id", ev("$pageview", "u\xff", `{}`), "22021"},
		{"lone surrogate", ev("$pageview", "u1", `{"a":"\ud800"}`), "22P02"},
		{"number out of range", ev("$pageview", "u1", `{"a":1e200000}`), "22003"},
		{"timestamp out of range", past, "22008"},
		{"5,000-character event name", ev(long, "u1", `{}`), "54000"},
		{"5,000-character distinct_id", ev("$pageview", long, `{}`), "54000"},
		{"5,000-character $group_key", ev("$groupidentify", "u1", `{"$group_type":"company","$group_key":"`+long+`"}`), "54000"},
		{"5,000-character $group_type", ev("$groupidentify", "u1", `{"$group_type":"`+long+`","$group_key":"k"}`), "54000"},
		{"5,000-character alias", ev("$create_alias", "u1", `{"alias":"`+long+`"}`), "54000"},
		{"5,000-character $anon_distinct_id", ev("$identify", "u1", `{"$anon_distinct_id":"`+long+`"}`), "54000"},
		{"empty properties", ev("$pageview", "u1", ``), "22P02"},
	}
}

// incompressible is n letters PostgreSQL cannot compress below its index row limit (a
// repeated letter would compress and fit).
func incompressible(n int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for range n {
		b.WriteByte(byte('a' + rng.IntN(26)))
	}
	return b.String()
}

// TestIngestPoisonBatch sends 999 good events with every poison mixed in, in one batch:
// the good ones are stored exactly once (also when the batch is delivered again), each
// poison is dead-lettered once with its reason, and ingestion carries on afterwards.
func TestIngestPoisonBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, res, _ := mustOpen(t)
	store := postgres.NewEventStore(db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	now := time.Now().UTC().Truncate(time.Microsecond)
	good := events(res.ProjectID, 999, 60, 3)
	poisons := poisonEvents(now)
	batch := append([]controlplane.Event(nil), good...)
	rng := rand.New(rand.NewPCG(12, 34))
	for _, p := range poisons {
		i := rng.IntN(len(batch) + 1)
		batch = append(batch[:i], append([]controlplane.Event{p.event}, batch[i:]...)...)
	}
	call := []controlplane.EventBatch{{ProjectID: res.ProjectID, Events: batch, EdgeID: "edge-a"}}

	// For comparison, a batch of the same size without poison takes the fast path.
	clean := events(res.ProjectID, len(batch), 60, 4)
	start := time.Now()
	if r, err := store.Ingest(ctx, []controlplane.EventBatch{{ProjectID: res.ProjectID, Events: clean}}); err != nil || r.Stored != len(clean) {
		t.Fatalf("clean batch: %+v, %v", r, err)
	}
	t.Logf("%d good events stored in %v", len(clean), time.Since(start))

	start = time.Now()
	got, err := store.Ingest(ctx, call)
	if err != nil {
		t.Fatalf("ingest: %v", err)
	}
	t.Logf("999 good events and %d poisons stored in %v", len(poisons), time.Since(start))
	if got.Stored != 999 || got.Duplicates != 0 || len(got.DeadLetters) != len(poisons) {
		t.Fatalf("result: stored %d, duplicates %d, dead letters %d; want 999, 0, %d", got.Stored, got.Duplicates, len(got.DeadLetters), len(poisons))
	}
	wantCodes := map[string]string{}
	for _, p := range poisons {
		wantCodes[p.event.UUID] = p.code
	}
	gotCodes := map[string]string{}
	for _, d := range got.DeadLetters {
		gotCodes[d.UUID] = d.Code
		if d.Reason == "" || d.ProjectID != res.ProjectID {
			t.Errorf("dead letter %+v", d)
		}
	}
	if diff := cmp.Diff(wantCodes, gotCodes); diff != "" {
		t.Errorf("dead-lettered SQLSTATEs by uuid (-want +got):\n%s", diff)
	}

	// The table holds each poison once, raw, with its reason and edge.
	rows, err := db.Pool.Query(ctx, `SELECT event_uuid, sqlstate, reason, raw, raw_format, edge_id FROM dead_letters WHERE project_id = $1`, res.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	for rows.Next() {
		var id, code, reason, format, edge string
		var raw []byte
		if err := rows.Scan(&id, &code, &reason, &raw, &format, &edge); err != nil {
			t.Fatal(err)
		}
		stored++
		if code != wantCodes[id] || reason == "" || len(raw) == 0 || format != "json" || edge != "edge-a" {
			t.Errorf("dead letter %s: %s %q format %s edge %s", id, code, reason, format, edge)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if stored != len(poisons) {
		t.Errorf("%d dead letters stored, want %d", stored, len(poisons))
	}

	// Redelivered (the edge never saw the answer): nothing new anywhere.
	again, err := store.Ingest(ctx, call)
	if err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	if again.Stored != 0 || again.Duplicates != 999 || len(again.DeadLetters) != 0 {
		t.Errorf("redelivery: stored %d, duplicates %d, dead letters %d; want 0, 999, 0", again.Stored, again.Duplicates, len(again.DeadLetters))
	}
	var nEvents, distinct, deadLetters int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT uuid), (SELECT count(*) FROM dead_letters) FROM events
		WHERE project_id = $1 AND uuid = ANY($2::uuid[])`, res.ProjectID, uuids(good)).Scan(&nEvents, &distinct, &deadLetters); err != nil {
		t.Fatal(err)
	}
	if nEvents != 999 || distinct != 999 || deadLetters != len(poisons) {
		t.Errorf("stored %d events (%d distinct) and %d dead letters; want 999, 999, %d", nEvents, distinct, deadLetters, len(poisons))
	}
	// The good $identify events still applied: every one set plan=pro on its person.
	var identified int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM persons WHERE project_id = $1 AND properties->>'plan' = 'pro'`,
		res.ProjectID).Scan(&identified); err != nil {
		t.Fatal(err)
	}
	if identified == 0 {
		t.Error("no person has the properties the good $identify events set")
	}

	// An event sent afterwards is stored at once.
	after := events(res.ProjectID, 1, 1, 99)
	if r, err := store.Ingest(ctx, []controlplane.EventBatch{{ProjectID: res.ProjectID, Events: after}}); err != nil || r.Stored != 1 {
		t.Fatalf("event after the poison batch: %+v, %v", r, err)
	}
}

func uuids(events []controlplane.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.UUID
	}
	return out
}

// TestIngestTransientErrorStoresNothing checks that an error that is not the data's (here
// the project's ingest lock held elsewhere until the caller's deadline) fails the call,
// storing and dead-lettering nothing, so the edge sends the batch again.
func TestIngestTransientErrorStoresNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, res, _ := mustOpen(t)
	store := postgres.NewEventStore(db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	const ingestLockClass = 7200001
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, $2::int)`, ingestLockClass, res.ProjectID); err != nil {
		t.Fatal(err)
	}
	batch := append(events(res.ProjectID, 10, 5, 1), poisonEvents(time.Now())[0].event)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := store.Ingest(short, []controlplane.EventBatch{{ProjectID: res.ProjectID, Events: batch}}); err == nil {
		t.Fatal("ingest succeeded while the project's lock was held")
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1, $2::int)`, ingestLockClass, res.ProjectID); err != nil {
		t.Fatal(err)
	}
	var n, dead int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM dead_letters)`).Scan(&n, &dead); err != nil {
		t.Fatal(err)
	}
	if n != 0 || dead != 0 {
		t.Errorf("a failed call stored %d events and %d dead letters", n, dead)
	}
	got, err := store.Ingest(ctx, []controlplane.EventBatch{{ProjectID: res.ProjectID, Events: batch}})
	if err != nil || got.Stored != 10 || len(got.DeadLetters) != 1 {
		t.Errorf("retry: %+v, %v", got, err)
	}
}

// TestIngestUnknownProject checks that events for a project that does not exist (deleted
// since the edge accepted them) are dead-lettered rather than blocking the edge.
func TestIngestUnknownProject(t *testing.T) {
	t.Parallel()
	db, res, _ := mustOpen(t)
	store := postgres.NewEventStore(db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	got, err := store.Ingest(context.Background(), []controlplane.EventBatch{
		{ProjectID: 424242, Events: events(424242, 3, 2, 1)},
		{ProjectID: res.ProjectID, Events: events(res.ProjectID, 5, 2, 2)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Stored != 5 || len(got.DeadLetters) != 3 || got.DeadLetters[0].Code != "23503" {
		t.Errorf("result %+v", got)
	}
}
