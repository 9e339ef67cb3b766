package postgres_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestSessionsInBatches: sessions opened together, each replacing its edge's earlier one and
// no other edge's; acknowledgements written together are each answered: a session of
// another edge or an unknown one is NotFound and writes nothing, and a session acknowledging
// twice in one batch ends with what it said last (a version, or a project removed).
func TestSessionsInBatches(t *testing.T) {
	t.Parallel()
	db, _, _ := mustOpen(t)
	ctx := context.Background()
	store := postgres.NewEdgeSessionStore(db)
	const replica = "00000000-0000-0000-0000-000000000001"
	a, b, old := uuid.NewString(), uuid.NewString(), uuid.NewString()
	if err := store.OpenSessions(ctx, []controlplane.SessionOpening{{ID: old, ReplicaID: replica, Replica: "r1", EdgeName: "edge-a", EdgeID: "a-1"}}); err != nil {
		t.Fatal(err)
	}
	// One write opens both, and forgets the session a's stream replaces; b names a's old
	// session too, but is another edge: that does not forget it.
	if err := store.OpenSessions(ctx, []controlplane.SessionOpening{
		{ID: a, ReplicaID: replica, Replica: "r1", EdgeName: "edge-a", EdgeID: "a-1", Replaces: old},
		{ID: b, ReplicaID: replica, Replica: "r1", EdgeName: "edge-b", EdgeID: "b-1", Replaces: a},
	}); err != nil {
		t.Fatal(err)
	}
	var open int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM edge_sessions WHERE id::text = ANY($1)`, []string{a, b, old}).Scan(&open); err != nil || open != 2 {
		t.Fatalf("%d of a, b and the replaced session open (%v); want a and b", open, err)
	}
	res, err := store.Acknowledge(ctx, []controlplane.Acknowledgement{
		{SessionID: a, EdgeName: "edge-a", Versions: map[int64]int64{1: 3, 2: 5}},
		{SessionID: b, EdgeName: "edge-a", Versions: map[int64]int64{1: 9}}, // not edge-a's session
		{SessionID: a, EdgeName: "edge-a", Versions: map[int64]int64{1: 4}, Removed: []int64{2}},
		{SessionID: "00000000-0000-0000-0000-0000000000ff", EdgeName: "edge-a", Versions: map[int64]int64{1: 1}},
		{SessionID: b, EdgeName: "edge-b", Versions: map[int64]int64{7: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantNotFound := []bool{false, true, false, true, false}
	for i, r := range res {
		if (controlplane.ErrorKind(r) == controlplane.NotFound) != wantNotFound[i] || (r != nil && !wantNotFound[i]) {
			t.Errorf("acknowledgement %d: %v", i, r)
		}
	}
	rows, err := db.Pool.Query(ctx, `SELECT session_id::text, project_id, version FROM edge_session_versions ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]map[int64]int64{}
	for rows.Next() {
		var s string
		var p, v int64
		if err := rows.Scan(&s, &p, &v); err != nil {
			t.Fatal(err)
		}
		if got[s] == nil {
			got[s] = map[int64]int64{}
		}
		got[s][p] = v
	}
	if len(got[a]) != 1 || got[a][1] != 4 || len(got[b]) != 1 || got[b][7] != 1 {
		t.Errorf("stored %v; want %s: {1: 4}, %s: {7: 1}", got, a, b)
	}
	if err := store.CloseSessions(ctx, []string{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM edge_session_versions`).Scan(&open); err != nil || open != 0 {
		t.Errorf("%d versions left after closing the sessions (%v)", open, err)
	}
}
