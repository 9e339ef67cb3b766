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

// TestCountLaggards: the count a rollout waiter polls is the number of edges FindProjectEdges
// lists as laggards, for every version asked; an edge not serving the project is not counted,
// one that acknowledged nothing is; an unknown project is NotFound.
func TestCountLaggards(t *testing.T) {
	t.Parallel()
	db, boot, _ := mustOpen(t)
	ctx := context.Background()
	store := postgres.NewEdgeSessionStore(db)
	edges := postgres.NewEdgeService(db)
	p := boot.ProjectID
	var org int64
	if err := db.Pool.QueryRow(ctx, `SELECT organization_id FROM projects WHERE id = $1`, p).Scan(&org); err != nil {
		t.Fatal(err)
	}
	other, err := postgres.NewProjectService(db).CreateProject(controlplane.NewContextWithUser(ctx, &controlplane.User{OrganizationID: org}), org, "other")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct {
		name     string
		projects []int64
	}{{"edge-a", nil}, {"edge-b", []int64{p}}, {"edge-c", []int64{other.ID}}, {"edge-d", nil}} {
		if _, _, err := edges.CreateEdge(ctx, e.name, e.projects); err != nil {
			t.Fatal(err)
		}
	}
	const replica = "00000000-0000-0000-0000-000000000001"
	ids := map[string]string{}
	var opens []controlplane.SessionOpening
	for _, name := range []string{"edge-a", "edge-b", "edge-c", "edge-d"} {
		ids[name] = uuid.NewString()
		opens = append(opens, controlplane.SessionOpening{ID: ids[name], ReplicaID: replica, Replica: "r1", EdgeName: name, EdgeID: name + "-1"})
	}
	if err := store.OpenSessions(ctx, opens); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Acknowledge(ctx, []controlplane.Acknowledgement{
		{SessionID: ids["edge-a"], EdgeName: "edge-a", Versions: map[int64]int64{p: 5}},
		{SessionID: ids["edge-b"], EdgeName: "edge-b", Versions: map[int64]int64{p: 3}},
		{SessionID: ids["edge-c"], EdgeName: "edge-c", Versions: map[int64]int64{other.ID: 1}},
		// edge-d has acknowledged nothing: it serves version 0.
	}); err != nil {
		t.Fatal(err)
	}
	listed, err := store.FindProjectEdges(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed.Edges) != 3 {
		t.Fatalf("listed %d edges serving the project, want a, b and d: %+v", len(listed.Edges), listed.Edges)
	}
	for version, want := range map[int64]int{1: 1, 3: 1, 4: 2, 5: 2, 6: 3} {
		n, err := store.CountLaggards(ctx, p, version)
		if err != nil {
			t.Fatal(err)
		}
		if n != want || n != len(listed.Laggards(version)) {
			t.Errorf("version %d: %d laggards counted, %d listed; want %d", version, n, len(listed.Laggards(version)), want)
		}
	}
	if _, err := store.CountLaggards(ctx, p+999, 1); controlplane.ErrorKind(err) != controlplane.NotFound {
		t.Errorf("an unknown project: %v, want NotFound", err)
	}
}
