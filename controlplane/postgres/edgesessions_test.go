package postgres_test

import (
	"context"
	"testing"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestAcknowledgeBatch: acknowledgements written together are each answered: a session of
// another edge or an unknown one is NotFound and writes nothing, and a session acknowledging
// twice in one batch ends with what it said last (a version, or a project removed).
func TestAcknowledgeBatch(t *testing.T) {
	t.Parallel()
	db, _, _ := mustOpen(t)
	ctx := context.Background()
	store := postgres.NewEdgeSessionStore(db)
	const replica = "00000000-0000-0000-0000-000000000001"
	a, err := store.OpenSession(ctx, replica, "r1", "edge-a", "a-1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := store.OpenSession(ctx, replica, "r1", "edge-b", "b-1")
	if err != nil {
		t.Fatal(err)
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
}
