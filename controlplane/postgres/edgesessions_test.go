package postgres_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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
// one that acknowledged nothing is; an unknown project is NotFound. AcknowledgedBelow tells
// whether an acknowledgement of the project is below a version.
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
	// The sign a waiter reads between counts: edge-b acknowledged 3, edge-a 5; edge-d, which
	// acknowledged nothing, gives none.
	for version, want := range map[int64]bool{3: false, 4: true, 6: true} {
		if below, err := store.AcknowledgedBelow(ctx, p, version); err != nil || below != want {
			t.Errorf("acknowledged below %d: %v (%v), want %v", version, below, err, want)
		}
	}
	if _, err := store.CountLaggards(ctx, p+999, 1); controlplane.ErrorKind(err) != controlplane.NotFound {
		t.Errorf("an unknown project: %v, want NotFound", err)
	}
}

// TestRelayedSessions: a relay reports the sessions behind it, two tiers deep; they are
// listed with their paths and count for a project only when every edge on the path is served
// it; a report that names a session outside the relay's tree is refused for it (unknown);
// the replica's heartbeat keeps the whole tree; and when the relay's session closes, the
// sessions behind it end with it.
func TestRelayedSessions(t *testing.T) {
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
	otherProject, err := postgres.NewProjectService(db).CreateProject(controlplane.NewContextWithUser(ctx, &controlplane.User{OrganizationID: org}), org, "other")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct {
		name     string
		projects []int64
	}{{"relay-1", nil}, {"relay-2", nil}, {"leaf-a", nil}, {"leaf-b", nil}, {"narrow-relay", []int64{otherProject.ID}}, {"leaf-c", nil}, {"other", nil}} {
		if _, _, err := edges.CreateEdge(ctx, e.name, e.projects); err != nil {
			t.Fatal(err)
		}
	}
	const replica = "00000000-0000-0000-0000-000000000001"
	r1, narrow, other := uuid.NewString(), uuid.NewString(), uuid.NewString()
	if err := store.OpenSessions(ctx, []controlplane.SessionOpening{
		{ID: r1, ReplicaID: replica, Replica: "r1", EdgeName: "relay-1", EdgeID: "relay-1"},
		{ID: narrow, ReplicaID: replica, Replica: "r1", EdgeName: "narrow-relay", EdgeID: "narrow"},
		{ID: other, ReplicaID: replica, Replica: "r1", EdgeName: "other", EdgeID: "other"},
	}); err != nil {
		t.Fatal(err)
	}
	r2, leafA, leafB, leafC := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	unknown, err := store.ReportRelayed(ctx, controlplane.RelayReport{Relay: "relay-1", Session: r1, Replica: "r1",
		Opened: []controlplane.RelayedOpening{
			{ID: r2, EdgeName: "relay-2", EdgeID: "relay-2"},
			{ID: leafA, EdgeName: "leaf-a", EdgeID: "leaf-a"},
			{ID: leafB, Parent: r2, EdgeName: "leaf-b", EdgeID: "leaf-b"},
			{ID: uuid.NewString(), Parent: other, EdgeName: "leaf-a", EdgeID: "stolen"}, // not behind relay-1
		},
		Acks: []controlplane.Acknowledgement{{SessionID: leafB, Versions: map[int64]int64{p: 7}}, {SessionID: other, Versions: map[int64]int64{p: 9}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(unknown) != 2 {
		t.Errorf("unknown %v: want the session hung off another edge's and the acknowledgement of another edge's session", unknown)
	}
	if _, err := store.ReportRelayed(ctx, controlplane.RelayReport{Relay: "relay-2", Session: r1}); controlplane.ErrorKind(err) != controlplane.NotFound {
		t.Errorf("a report naming another relay's session: %v, want NotFound", err)
	}
	if _, err := store.ReportRelayed(ctx, controlplane.RelayReport{Relay: "narrow-relay", Session: narrow, Replica: "r1",
		Opened: []controlplane.RelayedOpening{{ID: leafC, EdgeName: "leaf-c", EdgeID: "leaf-c"}}}); err != nil {
		t.Fatal(err)
	}
	if err := store.Heartbeat(ctx, replica); err != nil {
		t.Fatal(err)
	}
	listed, err := store.FindProjectEdges(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]controlplane.EdgeProjectStatus{}
	for _, e := range listed.Edges {
		paths[e.EdgeID] = e
	}
	want := map[string]string{"relay-1": "relay-1", "relay-2": "relay-1 → relay-2", "leaf-a": "relay-1 → leaf-a",
		"leaf-b": "relay-1 → relay-2 → leaf-b", "other": "other"}
	if len(paths) != len(want) {
		t.Errorf("listed %v; want %v (not the narrow relay nor the edge behind it: it is not served the project)", paths, want)
	}
	for id, path := range want {
		if paths[id].Path != path || paths[id].Replica != "r1" {
			t.Errorf("%s listed with path %q on %q, want %q on r1", id, paths[id].Path, paths[id].Replica, path)
		}
	}
	if paths["leaf-b"].Version != 7 {
		t.Errorf("leaf-b serves %d, want its acknowledged 7", paths["leaf-b"].Version)
	}
	// relay-2's stream ends: relay-1 reports it closed, and leaf-b behind it ends too.
	if _, err := store.ReportRelayed(ctx, controlplane.RelayReport{Relay: "relay-1", Session: r1, Replica: "r1", Closed: []string{r2}}); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM edge_sessions WHERE id::text = ANY($1)`, []string{r2, leafB}).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d of relay-2 and leaf-b left after relay-2 closed (%v)", left, err)
	}
	if err := store.CloseSessions(ctx, []string{r1}); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM edge_sessions WHERE id::text = ANY($1)`, []string{r1, r2, leafA, leafB}).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d sessions of relay-1's tree left after it closed (%v)", left, err)
	}
	if n, err := store.CountLaggards(ctx, p, 1); err != nil || n != 1 {
		t.Errorf("laggards after relay-1 closed: %d (%v), want other alone", n, err)
	}
}

// TestRelayedReportInRuns checks that a report's opened sessions, written in runs, end as if
// written one at a time in order: one replacing a session opened earlier in the same report
// forgets it, one reported again moves to its new parent, and an id taken elsewhere is
// refused. Acknowledgements count for the sessions behind the relay however deep, and one
// naming no session is refused, not an error.
func TestRelayedReportInRuns(t *testing.T) {
	t.Parallel()
	db, _, _ := mustOpen(t)
	ctx := context.Background()
	store := postgres.NewEdgeSessionStore(db)
	edges := postgres.NewEdgeService(db)
	for _, name := range []string{"relay", "sub-relay", "leaf", "elsewhere"} {
		if _, _, err := edges.CreateEdge(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
	}
	const replica = "00000000-0000-0000-0000-000000000001"
	relay, taken := uuid.NewString(), uuid.NewString()
	if err := store.OpenSessions(ctx, []controlplane.SessionOpening{
		{ID: relay, ReplicaID: replica, Replica: "r1", EdgeName: "relay", EdgeID: "relay"},
		{ID: taken, ReplicaID: replica, Replica: "r1", EdgeName: "elsewhere", EdgeID: "elsewhere"},
	}); err != nil {
		t.Fatal(err)
	}
	sub, first, second, moved := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	unknown, err := store.ReportRelayed(ctx, controlplane.RelayReport{Relay: "relay", Session: relay, Replica: "r1",
		Opened: []controlplane.RelayedOpening{
			{ID: sub, EdgeName: "sub-relay", EdgeID: "sub"},
			{ID: first, EdgeName: "leaf", EdgeID: "leaf"},
			{ID: moved, EdgeName: "leaf", EdgeID: "moved"},
			{ID: second, EdgeName: "leaf", EdgeID: "leaf", Replaces: first},
			{ID: moved, Parent: sub, EdgeName: "leaf", EdgeID: "moved"},
			{ID: taken, EdgeName: "elsewhere", EdgeID: "elsewhere"},
		},
		Acks: []controlplane.Acknowledgement{{SessionID: moved, Versions: map[int64]int64{1: 3}}, {SessionID: "not-a-session", Versions: map[int64]int64{1: 3}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(unknown, []string{taken, "not-a-session"}) {
		t.Errorf("unknown %v, want the session taken elsewhere and the acknowledgement of no session", unknown)
	}
	var acked int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM edge_session_versions WHERE session_id = $1 AND version = 3`, moved).Scan(&acked); err != nil || acked != 1 {
		t.Errorf("moved's acknowledgement, two deep behind the relay: %d rows (%v), want 1", acked, err)
	}
	parents := map[string]string{}
	rows, err := db.Pool.Query(ctx, `SELECT id::text, replica_id::text FROM edge_sessions`)
	if err != nil {
		t.Fatal(err)
	}
	var id, parent string
	if _, err := pgx.ForEachRow(rows, []any{&id, &parent}, func() error { parents[id] = parent; return nil }); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{relay: replica, taken: replica, sub: relay, second: relay, moved: sub}
	if !maps.Equal(parents, want) {
		t.Errorf("sessions and parents %v, want %v (first replaced by second, moved behind sub)", parents, want)
	}
}

// relayWithLeaf opens the session of edge "relay" on replica, and that of edge "leaf" behind
// it, as the relay reports it; it returns their ids.
func relayWithLeaf(t *testing.T, db *postgres.DB, replica string) (relay, leaf string) {
	t.Helper()
	ctx := context.Background()
	store := postgres.NewEdgeSessionStore(db)
	for _, name := range []string{"relay", "leaf"} {
		if _, _, err := postgres.NewEdgeService(db).CreateEdge(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
	}
	relay, leaf = uuid.NewString(), uuid.NewString()
	if err := store.OpenSessions(ctx, []controlplane.SessionOpening{
		{ID: relay, ReplicaID: replica, Replica: "r1", EdgeName: "relay", EdgeID: "relay"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ReportRelayed(ctx, controlplane.RelayReport{Relay: "relay", Session: relay, Replica: "r1",
		Opened: []controlplane.RelayedOpening{{ID: leaf, EdgeName: "leaf", EdgeID: "leaf"}}}); err != nil {
		t.Fatal(err)
	}
	return relay, leaf
}

// TestRelayReportDuringHeartbeat: a relay's report, and the acknowledgements in it, are
// written while a heartbeat holds the relay's session row (it rewrites every session's): a
// report that waited for it stalled the acknowledgements of 10,000 edges behind four relays
// for a second each heartbeat.
func TestRelayReportDuringHeartbeat(t *testing.T) {
	t.Parallel()
	db, boot, _ := mustOpen(t)
	ctx := context.Background()
	store := postgres.NewEdgeSessionStore(db)
	relay, leaf := relayWithLeaf(t, db, "00000000-0000-0000-0000-000000000001")
	heartbeat, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer heartbeat.Rollback(ctx)
	if _, err := heartbeat.Exec(ctx, `UPDATE edge_sessions SET seen_at = now() WHERE id = ANY($1::uuid[])`, []string{relay, leaf}); err != nil {
		t.Fatal(err)
	}
	reportCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	unknown, err := store.ReportRelayed(reportCtx, controlplane.RelayReport{Relay: "relay", Session: relay, Replica: "r1",
		Acks: []controlplane.Acknowledgement{{SessionID: leaf, Versions: map[int64]int64{boot.ProjectID: 4}}}})
	if err != nil || len(unknown) != 0 {
		t.Fatalf("a report while the heartbeat holds the sessions: unknown %v, %v", unknown, err)
	}
	var version int64
	if err := db.Pool.QueryRow(ctx, `SELECT version FROM edge_session_versions WHERE session_id = $1`, leaf).Scan(&version); err != nil || version != 4 {
		t.Fatalf("the leaf's acknowledgement: version %d, %v; want 4", version, err)
	}
	if _, err := store.ReportRelayed(ctx, controlplane.RelayReport{Relay: "relay", Session: "not-a-uuid", Replica: "r1"}); controlplane.ErrorKind(err) != controlplane.NotFound {
		t.Errorf("a report of a session that is no UUID: %v, want NotFound", err)
	}
}

// TestHeartbeatMarksOnlyRoots: the heartbeat writes the replica's own sessions, not those
// behind a relay (their rows are left as they are); a session behind a relay counts while its
// tree's root is marked, however old its own mark, and stops counting with the root's; and
// another replica's heartbeat deletes a stale root with its whole tree.
func TestHeartbeatMarksOnlyRoots(t *testing.T) {
	t.Parallel()
	db, boot, _ := mustOpen(t)
	ctx := context.Background()
	store := postgres.NewEdgeSessionStore(db)
	const replica, survivor = "00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002"
	relay, leaf := relayWithLeaf(t, db, replica)
	age := func(id string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, `UPDATE edge_sessions SET seen_at = now() - interval '1 hour' WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	rowVersion := func(id string) (xmin string, fresh bool) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `SELECT xmin::text, seen_at > now() - interval '1 minute' FROM edge_sessions WHERE id = $1`, id).Scan(&xmin, &fresh); err != nil {
			t.Fatal(err)
		}
		return xmin, fresh
	}
	listed := func() []string {
		t.Helper()
		edges, err := store.FindProjectEdges(ctx, boot.ProjectID)
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, e := range edges.Edges {
			paths = append(paths, e.Path)
		}
		return paths
	}
	age(relay)
	age(leaf)
	leafRow, _ := rowVersion(leaf)
	if err := store.Heartbeat(ctx, replica); err != nil {
		t.Fatal(err)
	}
	if _, fresh := rowVersion(relay); !fresh {
		t.Error("the heartbeat did not mark the replica's own session")
	}
	if row, fresh := rowVersion(leaf); row != leafRow || fresh {
		t.Errorf("the heartbeat rewrote the session behind the relay (xmin %s → %s, fresh %v)", leafRow, row, fresh)
	}
	if got, want := listed(), []string{"relay", "relay → leaf"}; !slices.Equal(got, want) {
		t.Errorf("with the root marked: %v, want %v (the leaf's own mark is an hour old)", got, want)
	}
	if n, err := store.CountLaggards(ctx, boot.ProjectID, 1); err != nil || n != 2 {
		t.Errorf("laggards with the root marked: %d (%v), want 2", n, err)
	}
	age(relay) // its replica died
	if got := listed(); len(got) != 0 {
		t.Errorf("with the root's mark an hour old: %v, want none", got)
	}
	if n, err := store.CountLaggards(ctx, boot.ProjectID, 1); err != nil || n != 0 {
		t.Errorf("laggards with the root's mark an hour old: %d (%v), want 0", n, err)
	}
	if err := store.Heartbeat(ctx, survivor); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM edge_sessions WHERE id = ANY($1::uuid[])`, []string{relay, leaf}).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d of the dead replica's tree left after another replica's heartbeat (%v)", left, err)
	}
}

// BenchmarkRolloutReads times the rollout waiter's reads with 10,000 edges behind four
// relays, all acknowledged: counting the laggards, and listing every edge with its path (a
// micro-benchmark on a real PostgreSQL).
// fillRollout opens 10,000 sessions behind four relays' sessions, all acknowledging version
// 5 of project, and returns each relay's report of their acknowledgements.
func fillRollout(b testing.TB, db *postgres.DB, project int64) []controlplane.RelayReport {
	b.Helper()
	ctx := context.Background()
	store := postgres.NewEdgeSessionStore(db)
	for _, name := range []string{"relay", "leaf"} {
		if _, _, err := postgres.NewEdgeService(db).CreateEdge(ctx, name, nil); err != nil {
			b.Fatal(err)
		}
	}
	const replica = "00000000-0000-0000-0000-000000000001"
	var reports []controlplane.RelayReport
	for r := range 4 {
		relay := uuid.NewString()
		if err := store.OpenSessions(ctx, []controlplane.SessionOpening{
			{ID: relay, ReplicaID: replica, Replica: "r1", EdgeName: "relay", EdgeID: fmt.Sprint("relay-", r)},
		}); err != nil {
			b.Fatal(err)
		}
		report := controlplane.RelayReport{Relay: "relay", Session: relay, Replica: "r1"}
		for e := range 2500 {
			id := uuid.NewString()
			report.Opened = append(report.Opened, controlplane.RelayedOpening{ID: id, EdgeName: "leaf", EdgeID: fmt.Sprint("leaf-", r, "-", e)})
			report.Acks = append(report.Acks, controlplane.Acknowledgement{SessionID: id, Versions: map[int64]int64{project: 5}})
		}
		if _, err := store.Acknowledge(ctx, []controlplane.Acknowledgement{{SessionID: relay, EdgeName: "relay", Versions: map[int64]int64{project: 5}}}); err != nil {
			b.Fatal(err)
		}
		if unknown, err := store.ReportRelayed(ctx, report); err != nil || len(unknown) != 0 {
			b.Fatal(unknown, err)
		}
		report.Opened = nil
		reports = append(reports, report)
	}
	return reports
}

func BenchmarkRolloutReads(b *testing.B) {
	db, boot, _ := mustOpen(b)
	ctx := context.Background()
	store := postgres.NewEdgeSessionStore(db)
	fillRollout(b, db, boot.ProjectID)
	b.Run("count", func(b *testing.B) {
		for b.Loop() {
			if n, err := store.CountLaggards(ctx, boot.ProjectID, 5); err != nil || n != 0 {
				b.Fatal(n, err)
			}
		}
	})
	b.Run("list", func(b *testing.B) {
		for b.Loop() {
			if edges, err := store.FindProjectEdges(ctx, boot.ProjectID); err != nil || len(edges.Edges) != 10004 {
				b.Fatal(err)
			}
		}
	})
}

// TestMovedSessionCarriesItsTree: a relay behind a relay that moves to another parent in the
// same tree takes the sessions behind it along, listed under their new paths; a move behind
// one of its own sessions is refused.
func TestMovedSessionCarriesItsTree(t *testing.T) {
	t.Parallel()
	db, boot, _ := mustOpen(t)
	ctx := context.Background()
	store := postgres.NewEdgeSessionStore(db)
	for _, name := range []string{"top", "a", "b", "mid", "leaf"} {
		if _, _, err := postgres.NewEdgeService(db).CreateEdge(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
	}
	top, a, b, mid, leaf := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	if err := store.OpenSessions(ctx, []controlplane.SessionOpening{
		{ID: top, ReplicaID: "00000000-0000-0000-0000-000000000001", Replica: "r1", EdgeName: "top", EdgeID: "top"},
	}); err != nil {
		t.Fatal(err)
	}
	report := func(opened ...controlplane.RelayedOpening) {
		t.Helper()
		if unknown, err := store.ReportRelayed(ctx, controlplane.RelayReport{Relay: "top", Session: top, Replica: "r1", Opened: opened}); err != nil || len(unknown) != 0 {
			t.Fatalf("report: unknown %v, %v", unknown, err)
		}
	}
	report(controlplane.RelayedOpening{ID: a, EdgeName: "a", EdgeID: "a"}, controlplane.RelayedOpening{ID: b, EdgeName: "b", EdgeID: "b"},
		controlplane.RelayedOpening{ID: mid, Parent: a, EdgeName: "mid", EdgeID: "mid"},
		controlplane.RelayedOpening{ID: leaf, Parent: mid, EdgeName: "leaf", EdgeID: "leaf"})
	paths := func() map[string]string {
		t.Helper()
		edges, err := store.FindProjectEdges(ctx, boot.ProjectID)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, e := range edges.Edges {
			out[e.EdgeID] = e.Path
		}
		return out
	}
	if got := paths()["leaf"]; got != "top → a → mid → leaf" {
		t.Fatalf("leaf's path %q before the move", got)
	}
	report(controlplane.RelayedOpening{ID: mid, Parent: b, EdgeName: "mid", EdgeID: "mid"})
	got := paths()
	if got["mid"] != "top → b → mid" || got["leaf"] != "top → b → mid → leaf" {
		t.Errorf("after mid moved behind b: mid %q, leaf %q", got["mid"], got["leaf"])
	}
	// Behind its own leaf, mid would hang off nothing that reaches a replica: refused.
	if unknown, err := store.ReportRelayed(ctx, controlplane.RelayReport{Relay: "top", Session: top, Replica: "r1",
		Opened: []controlplane.RelayedOpening{{ID: mid, Parent: leaf, EdgeName: "mid", EdgeID: "mid"}}}); err != nil || !slices.Equal(unknown, []string{mid}) {
		t.Errorf("mid moved behind its own leaf: unknown %v, %v; want it refused", unknown, err)
	}
	if got := paths(); got["leaf"] != "top → b → mid → leaf" {
		t.Errorf("after the refused move: leaf %q", got["leaf"])
	}
	if err := store.CloseSessions(ctx, []string{b}); err != nil {
		t.Fatal(err)
	}
	if got := paths(); len(got) != 2 || got["a"] != "top → a" {
		t.Errorf("after b closed: %v, want top and a alone (mid and leaf end with b)", got)
	}
}

// BenchmarkRelayReportAcks times a relay's report of a change acknowledged by the 2,500 edges
// behind it, with 10,000 behind four relays (a micro-benchmark on a real PostgreSQL).
func BenchmarkRelayReportAcks(b *testing.B) {
	db, boot, _ := mustOpen(b)
	ctx := context.Background()
	store := postgres.NewEdgeSessionStore(db)
	report := fillRollout(b, db, boot.ProjectID)[0]
	version := int64(5)
	for b.Loop() {
		version++
		for i := range report.Acks {
			report.Acks[i].Versions = map[int64]int64{boot.ProjectID: version}
		}
		if unknown, err := store.ReportRelayed(ctx, report); err != nil || len(unknown) != 0 {
			b.Fatal(unknown, err)
		}
	}
}
