package postgres_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// forwardEnv is a project with an admin acting on it, its event store and the forward queue.
type forwardEnv struct {
	db    *postgres.DB
	ctx   context.Context // as the admin
	proj  int64
	dests *postgres.EventDestinationService
	store *postgres.EventStore
	queue *postgres.SystemForwardQueue
}

func newForwardEnv(t *testing.T) *forwardEnv {
	t.Helper()
	db, res, _ := mustOpen(t)
	admin := mustKey(t, db, res.PersonalAPIKey)
	return &forwardEnv{db: db, ctx: controlplane.NewContextWithUser(context.Background(), &admin.User), proj: res.ProjectID,
		dests: postgres.NewEventDestinationService(db), store: postgres.NewEventStore(db, slog.New(slog.NewTextHandler(io.Discard, nil))),
		queue: postgres.NewSystemForwardQueue(db)}
}

func (e *forwardEnv) destination(t *testing.T, enabled bool) *controlplane.EventDestination {
	t.Helper()
	d, err := e.dests.CreateEventDestination(e.ctx, e.proj, controlplane.EventDestinationUpdate{
		URL: ptr("https://93.184.215.14"), APIKey: ptr("phc_receivingproject"), Enabled: ptr(enabled)})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (e *forwardEnv) ingest(t *testing.T, evs []controlplane.Event) controlplane.IngestResult {
	t.Helper()
	res, err := e.store.Ingest(context.Background(), []controlplane.EventBatch{{ProjectID: e.proj, Events: evs}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (e *forwardEnv) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// An event is queued for every enabled destination of its project exactly when it is first
// stored: a redelivered uuid is not queued again, a disabled destination gets nothing.
func TestIngestQueuesNewEventsForEnabledDestinations(t *testing.T) {
	t.Parallel()
	e := newForwardEnv(t)
	on, off := e.destination(t, true), e.destination(t, false)
	batch := events(e.proj, 200, 20, 1)
	batch = append(batch, batch[0]) // repeated within the batch
	e.ingest(t, batch)
	e.ingest(t, batch[:50]) // redelivered
	if n := e.count(t, `SELECT count(*) FROM event_forward_queue WHERE destination_id = $1`, on.ID); n != 200 {
		t.Errorf("enabled destination: %d queued, want 200", n)
	}
	if n := e.count(t, `SELECT count(*) FROM event_forward_queue WHERE destination_id = $1`, off.ID); n != 0 {
		t.Errorf("disabled destination: %d queued, want 0", n)
	}
	if n := e.count(t, `SELECT count(*) FROM events`); n != 200 {
		t.Errorf("%d events stored, want 200", n)
	}
	got, err := e.dests.FindEventDestinationByID(e.ctx, e.proj, on.ID)
	if err != nil || got.Queued != 200 || got.OldestQueuedAt == nil {
		t.Errorf("destination as read: %+v %v", got, err)
	}
}

// With store_events off the events are queued, not stored, and persons are still made.
func TestStoreEventsOffOnlyQueues(t *testing.T) {
	t.Parallel()
	e := newForwardEnv(t)
	d := e.destination(t, true)
	projects := postgres.NewProjectService(e.db)
	p, err := projects.UpdateProject(e.ctx, e.proj, controlplane.ProjectUpdate{StoreEvents: ptr(false)})
	if err != nil || p.StoreEvents {
		t.Fatalf("turn storage off: %+v %v", p, err)
	}
	batch := events(e.proj, 120, 12, 2)
	e.ingest(t, batch)
	e.ingest(t, batch[:30]) // redelivered while queued: queued once
	if n := e.count(t, `SELECT count(*) FROM events`); n != 0 {
		t.Errorf("%d events stored with storage off", n)
	}
	if n := e.count(t, `SELECT count(*) FROM event_forward_queue WHERE destination_id = $1`, d.ID); n != 120 {
		t.Errorf("%d queued, want 120", n)
	}
	if n := e.count(t, `SELECT count(*) FROM persons WHERE project_id = $1`, e.proj); n != 12 {
		t.Errorf("%d persons, want 12", n)
	}
	if n := e.count(t, `SELECT count(*) FROM persons WHERE properties ? 'plan'`); n == 0 {
		t.Error("the $identify events' $set was not applied")
	}
}

// Only an organisation admin turns storage off.
func TestStoreEventsIsForAdmins(t *testing.T) {
	t.Parallel()
	e := newForwardEnv(t)
	member, err := postgres.CreateUser(context.Background(), e.db, "admin@example.com", "member@example.com", "", false)
	if err != nil {
		t.Fatal(err)
	}
	mctx := controlplane.NewContextWithUser(context.Background(), member)
	projects := postgres.NewProjectService(e.db)
	if _, err := projects.UpdateProject(mctx, e.proj, controlplane.ProjectUpdate{StoreEvents: ptr(false)}); !errors.Is(err, controlplane.ErrPermissionDenied) {
		t.Errorf("a member turned storage off: %v", err)
	}
	if _, err := projects.UpdateProject(mctx, e.proj, controlplane.ProjectUpdate{Name: ptr("renamed")}); err != nil {
		t.Errorf("a member may still rename: %v", err)
	}
	if p, _ := projects.FindProjectByID(e.ctx, e.proj); !p.StoreEvents {
		t.Error("storage is off")
	}
}

// A claim leases one destination: a second claim gets nothing until the outcome is recorded;
// the outcome deletes the events done, keeps the dead letters, and a retry or a pause keeps
// the destination from being claimed.
func TestForwardQueueClaimAndFinish(t *testing.T) {
	t.Parallel()
	e := newForwardEnv(t)
	ctx := context.Background()
	d := e.destination(t, true)
	e.ingest(t, events(e.proj, 30, 5, 3))

	b, err := e.queue.Claim(ctx, 10, time.Minute)
	if err != nil || b == nil || len(b.Events) != 10 || b.DestinationID != d.ID || b.APIKey != "phc_receivingproject" {
		t.Fatalf("claim: %+v %v", b, err)
	}
	for i := 1; i < len(b.Events); i++ {
		if b.Events[i].Seq <= b.Events[i-1].Seq {
			t.Fatal("events not in queue order")
		}
	}
	if again, err := e.queue.Claim(ctx, 10, time.Minute); err != nil || again != nil {
		t.Fatalf("a leased destination was claimed again: %+v %v", again, err)
	}
	// Eight delivered, one dead-lettered, one left; then a retry in an hour.
	done := []int64{}
	for _, ev := range b.Events[:9] {
		done = append(done, ev.Seq)
	}
	dead := controlplane.ForwardDeadLetter{UUID: b.Events[8].UUID, Event: []byte(`{"event":"x"}`), StatusCode: 400, Error: "HTTP 400: bad"}
	if err := e.queue.Finish(ctx, b, controlplane.ForwardOutcome{Done: done, DeadLetters: []controlplane.ForwardDeadLetter{dead},
		Error: "HTTP 429", RetryAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, `SELECT count(*) FROM event_forward_queue`); n != 21 {
		t.Errorf("%d queued after finishing 9 of 30", n)
	}
	if again, err := e.queue.Claim(ctx, 10, time.Minute); err != nil || again != nil {
		t.Fatalf("a destination to be retried in an hour was claimed: %+v %v", again, err)
	}
	if next, err := e.queue.NextDue(ctx); err != nil || time.Until(next) < 50*time.Minute {
		t.Errorf("next due %v (%v), want in an hour", next, err)
	}
	got, err := e.dests.FindEventDestinationByID(e.ctx, e.proj, d.ID)
	if err != nil || got.SentEvents != 8 || got.LastError != "HTTP 429" || got.Queued != 21 {
		t.Errorf("destination after a partial send: %+v %v", got, err)
	}
	letters, total, err := e.dests.FindForwardDeadLetters(e.ctx, e.proj, d.ID, 10, 0)
	if err != nil || total != 1 || letters[0].UUID != dead.UUID || letters[0].StatusCode != 400 {
		t.Errorf("dead letters: %+v %d %v", letters, total, err)
	}
	backlog, err := e.queue.Backlog(ctx)
	if err != nil || len(backlog) != 1 || backlog[0].Events != 21 || backlog[0].DestinationID != d.ID {
		t.Errorf("backlog: %+v %v", backlog, err)
	}

	// A change lets it be tried at once; a pause stops it until the next change.
	if _, err := e.dests.UpdateEventDestination(e.ctx, e.proj, d.ID, controlplane.EventDestinationUpdate{}); err != nil {
		t.Fatal(err)
	}
	b, err = e.queue.Claim(ctx, 100, time.Minute)
	if err != nil || b == nil || len(b.Events) != 21 {
		t.Fatalf("claim after the change: %+v %v", b, err)
	}
	if err := e.queue.Finish(ctx, b, controlplane.ForwardOutcome{Error: "HTTP 401", Pause: "HTTP 401: bad key"}); err != nil {
		t.Fatal(err)
	}
	if again, err := e.queue.Claim(ctx, 10, time.Minute); err != nil || again != nil {
		t.Fatalf("a paused destination was claimed: %+v %v", again, err)
	}
	got, _ = e.dests.FindEventDestinationByID(e.ctx, e.proj, d.ID)
	if got.PausedReason != "HTTP 401: bad key" {
		t.Errorf("paused reason %q", got.PausedReason)
	}
	if _, err := e.dests.UpdateEventDestination(e.ctx, e.proj, d.ID, controlplane.EventDestinationUpdate{APIKey: ptr("phc_anotherkey")}); err != nil {
		t.Fatal(err)
	}
	if b, err = e.queue.Claim(ctx, 100, time.Minute); err != nil || b == nil || b.APIKey != "phc_anotherkey" {
		t.Fatalf("claim after a new key: %+v %v", b, err)
	}
	// An outcome recorded under a lease that was lost still deletes what was sent, but
	// leaves the destination's state to the claim that holds it.
	stale := *b
	stale.Lease = "00000000-0000-0000-0000-000000000000"
	if held, err := e.queue.Extend(ctx, &stale, time.Minute); err != nil || held {
		t.Errorf("a lost lease was extended: %v %v", held, err)
	}
	if held, err := e.queue.Extend(ctx, b, time.Minute); err != nil || !held {
		t.Errorf("the claim's lease was not extended: %v %v", held, err)
	}
	if err := e.queue.Finish(ctx, &stale, controlplane.ForwardOutcome{Done: []int64{b.Events[0].Seq}, Error: "x", RetryAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	got, _ = e.dests.FindEventDestinationByID(e.ctx, e.proj, d.ID)
	if got.Queued != 20 || got.LastError != "HTTP 401" { // the error before the change, not the stale one
		t.Errorf("after a stale outcome: queued %d, last error %q", got.Queued, got.LastError)
	}
}

// Destinations are checked: the key is required, the URL must be http(s), a project holds at
// most ten.
func TestEventDestinationValidation(t *testing.T) {
	t.Parallel()
	e := newForwardEnv(t)
	for name, upd := range map[string]controlplane.EventDestinationUpdate{
		"api_key": {URL: ptr("https://93.184.215.14")},
		"url":     {APIKey: ptr("phc_x")},
	} {
		var ce *controlplane.Error
		if _, err := e.dests.CreateEventDestination(e.ctx, e.proj, upd); !errors.As(err, &ce) || ce.Attr != name || ce.Code != "required" {
			t.Errorf("without %s: %v", name, err)
		}
	}
	var ce *controlplane.Error
	if _, err := e.dests.CreateEventDestination(e.ctx, e.proj, controlplane.EventDestinationUpdate{URL: ptr("ftp://x"), APIKey: ptr("k")}); !errors.As(err, &ce) || ce.Code != "invalid_url" {
		t.Errorf("ftp URL: %v", err)
	}
	for range controlplane.MaxDestinationsPerProject {
		e.destination(t, false)
	}
	if _, err := e.dests.CreateEventDestination(e.ctx, e.proj, controlplane.EventDestinationUpdate{URL: ptr("https://93.184.215.14"), APIKey: ptr("k")}); !errors.As(err, &ce) || ce.Code != "max_event_destinations" {
		t.Errorf("one too many: %v", err)
	}
}
