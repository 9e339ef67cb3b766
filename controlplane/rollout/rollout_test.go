package rollout_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/postgres/postgrestest"
	"github.com/flagedge/flagedge/controlplane/rollout"
	"github.com/flagedge/flagedge/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, postgres.Migrate)) }

// rig is a database with a project and two edges, each with a session open on one replica.
type rig struct {
	db       *postgres.DB
	store    *postgres.EdgeSessionStore
	project  int64
	sessions map[string]string // by edge name
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := t.Context()
	db, res, _ := postgrestest.Open(t)
	r := &rig{db: db, store: postgres.NewEdgeSessionStore(db), project: res.ProjectID, sessions: map[string]string{}}
	var opens []controlplane.SessionOpening
	for _, name := range []string{"a", "b"} {
		if _, _, err := postgres.NewEdgeService(db).CreateEdge(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
		r.sessions[name] = uuid.NewString()
		opens = append(opens, controlplane.SessionOpening{ID: r.sessions[name], ReplicaID: "00000000-0000-0000-0000-000000000001",
			Replica: "r1", EdgeName: name, EdgeID: name})
	}
	if err := r.store.OpenSessions(ctx, opens); err != nil {
		t.Fatal(err)
	}
	r.ack(t, "a", 1)
	r.ack(t, "b", 1)
	return r
}

func (r *rig) ack(t *testing.T, edge string, version int64) {
	t.Helper()
	if _, err := r.store.Acknowledge(context.Background(), []controlplane.Acknowledgement{
		{SessionID: r.sessions[edge], EdgeName: edge, Versions: map[int64]int64{r.project: version}}}); err != nil {
		t.Fatal(err)
	}
}

type waited struct {
	done bool
	err  error
	at   time.Time
}

func (r *rig) wait(w *rollout.Watcher, version int64) <-chan waited {
	out := make(chan waited, 1)
	go func() {
		_, done, err := w.Wait(context.Background(), r.project, version, 20*time.Second)
		out <- waited{done, err, time.Now()}
	}()
	return out
}

// counting is the store, counting the waiter's counts of laggards: each reads every edge's
// session.
type counting struct {
	*postgres.EdgeSessionStore
	counts atomic.Int64
}

func (c *counting) CountLaggards(ctx context.Context, projectID, version int64) (int, error) {
	c.counts.Add(1)
	return c.EdgeSessionStore.CountLaggards(ctx, projectID, version)
}

// TestWaitEndsWithTheLastAcknowledgement: a waiter is done once every edge serves the
// version, within a read of the notification of the last acknowledgement, and not before;
// while acknowledgements keep arriving it never counts the laggards.
func TestWaitEndsWithTheLastAcknowledgement(t *testing.T) {
	r := newRig(t)
	store := &counting{EdgeSessionStore: r.store}
	w := rollout.New(store)
	result := r.wait(w, 2)
	for range 12 { // 2.4 s of acknowledgements: two polls
		r.ack(t, "a", 2)
		w.Notify()
		select {
		case res := <-result:
			t.Fatalf("done %v (%v) with edge b still on version 1", res.done, res.err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if n := store.counts.Load(); n != 0 {
		t.Errorf("%d counts of the laggards while acknowledgements arrived, want none", n)
	}
	r.ack(t, "b", 2)
	acked := time.Now()
	w.Notify()
	res := <-result
	if !res.done || res.err != nil {
		t.Fatalf("done %v, %v once both edges serve version 2", res.done, res.err)
	}
	if took := res.at.Sub(acked); took > 900*time.Millisecond {
		t.Errorf("done %v after the last acknowledgement was notified, want within a read", took)
	}
}

// TestWaitPastAnAcknowledgementThatDoesNotCount: an edge revoked after acknowledging an older
// version leaves its acknowledgement behind, which no longer counts; the waiter finds it so
// once acknowledgements pause (its next polls count the laggards) and is done.
func TestWaitPastAnAcknowledgementThatDoesNotCount(t *testing.T) {
	r := newRig(t)
	if err := postgres.NewEdgeService(r.db).RevokeEdge(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	w := rollout.New(r.store)
	start := time.Now()
	result := r.wait(w, 2)
	r.ack(t, "a", 2)
	w.Notify()
	res := <-result
	if !res.done || res.err != nil {
		t.Fatalf("done %v, %v: edge a serves version 2 and b does not count", res.done, res.err)
	}
	if took := res.at.Sub(start); took > 5*time.Second {
		t.Errorf("done after %v, want within two polls of the last acknowledgement", took)
	}
}
