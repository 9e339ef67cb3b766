package postgres_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestActivePlansAcrossReplicas runs two control-plane replicas on one database, each with
// its own pool, and ingestion on B with its set of active plans kept by LISTEN, as serve
// wires it. A plan started on replica A is counted by ingestion on B without a restart; once
// A cancels it, B's set drops the project and B reads no plan for it: a plan started while
// the notification trigger is disabled goes uncounted on B until a notification names the
// project. A lost LISTEN connection makes B read plans for every project again.
func TestActivePlansAcrossReplicas(t *testing.T) {
	t.Parallel()
	fx := newPlanFixture(t) // replica A: fx.plans on fx.db
	url := fx.db.Pool.Config().ConnString()
	dbB, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dbB.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	eventsB := postgres.NewEventStore(dbB, log)
	setB := eventsB.ActivePlans()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = postgres.Listen(ctx, url, postgres.PlanChannel, log, setB.Notify, setB.Resync, setB.Lost)
	}()
	t.Cleanup(func() { stop(); <-done })

	waitUntil(t, "B knows the project has no plan", func() bool { return !setB.MayHave(fx.pid) })
	units := func() int64 {
		t.Helper()
		var n int64
		if err := fx.db.Pool.QueryRow(t.Context(), `SELECT coalesce(sum(units), 0) FROM release_plan_tallies t
			JOIN release_plans r ON r.id = t.plan_id WHERE r.state = 'running'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exposeOnB := func(users ...string) {
		t.Helper()
		now := time.Now()
		var evs []controlplane.Event
		for _, d := range users {
			props, _ := json.Marshal(map[string]any{"$feature_flag": fx.flag.Key, "$feature_flag_response": true})
			evs = append(evs, controlplane.Event{UUID: uuid.NewString(), ProjectID: fx.pid, Name: "$feature_flag_called",
				DistinctID: d, Properties: props, Timestamp: now, ReceivedAt: now})
		}
		if _, err := eventsB.Ingest(t.Context(), []controlplane.EventBatch{{ProjectID: fx.pid, Events: evs}}); err != nil {
			t.Fatal(err)
		}
	}

	fx.start(t, twoSteps())
	waitUntil(t, "B learns of the plan started on A", func() bool { return setB.MayHave(fx.pid) })
	exposeOnB("u1", "u2")
	if n := units(); n != 2 {
		t.Fatalf("B counted %d users for the plan started on A, want 2", n)
	}
	if _, err := fx.plans.SetReleasePlanState(fx.ctx, fx.pid, fx.flag.ID, controlplane.PlanCancelled); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "B learns the plan was cancelled on A", func() bool { return !setB.MayHave(fx.pid) })

	// Without its notification, B does not know of a new plan, and skips the project.
	if _, err := fx.db.Pool.Exec(t.Context(), `ALTER TABLE release_plans DISABLE TRIGGER release_plans_started`); err != nil {
		t.Fatal(err)
	}
	fx.start(t, twoSteps())
	exposeOnB("u3")
	if n := units(); n != 0 {
		t.Fatalf("B counted %d users for a project its set says has no plan", n)
	}
	if _, err := fx.db.Pool.Exec(t.Context(), `SELECT pg_notify($1, $2)`, postgres.PlanChannel, strconv.FormatInt(fx.pid, 10)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "B learns of the plan from the notification", func() bool { return setB.MayHave(fx.pid) })
	exposeOnB("u4")
	if n := units(); n != 1 {
		t.Fatalf("B counted %d users once notified, want 1", n)
	}

	setB.Lost()
	if !setB.MayHave(fx.pid + 1000) {
		t.Error("with its LISTEN connection lost, B still skips a project it knows nothing of")
	}
}

// waitUntil polls cond for up to ten seconds: notifications take milliseconds, -race and a
// busy machine more.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// keepActivePlans keeps store's set of projects with active plans by LISTEN, as serve does,
// until tb ends, and returns once the set is read.
func keepActivePlans(tb testing.TB, store *postgres.EventStore, url string) {
	tb.Helper()
	set := store.ActivePlans()
	ctx, stop := context.WithCancel(context.Background())
	done, ready := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		_ = postgres.Listen(ctx, url, postgres.PlanChannel, slog.New(slog.NewTextHandler(io.Discard, nil)), set.Notify,
			func(ctx context.Context) error {
				if err := set.Resync(ctx); err != nil {
					return err
				}
				once.Do(func() { close(ready) })
				return nil
			}, set.Lost)
	}()
	tb.Cleanup(func() { stop(); <-done })
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		tb.Fatal("the set of active plans was not read within 10 s")
	}
}
