package syncserver_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/ingest"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/syncserver"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// TestListEdgesForRelays: a relay learns the live edges with what each may receive through
// it — a relay scoped to a project passes on that project alone, and an edge that shares
// none with it is left out; an unchanged list is answered with its fingerprint only. A
// report of sessions with an id that is not a session's is refused (InvalidArgument), and
// one hung off a session that is not the relay's is NotFound.
func TestListEdgesForRelays(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	edges := postgres.NewEdgeService(e.db)
	var org int64
	if err := e.db.Pool.QueryRow(ctx, `SELECT organization_id FROM projects WHERE id = $1`, e.project).Scan(&org); err != nil {
		t.Fatal(err)
	}
	other, err := postgres.NewProjectService(e.db).CreateProject(controlplane.NewContextWithUser(ctx, &controlplane.User{OrganizationID: org}), org, "other")
	if err != nil {
		t.Fatal(err)
	}
	_, relayToken, err := edges.CreateEdge(ctx, "relay", []int64{e.project})
	if err != nil {
		t.Fatal(err)
	}
	for name, projects := range map[string][]int64{"all": nil, "both": {e.project, other.ID}, "elsewhere": {other.ID}} {
		if _, _, err := edges.CreateEdge(ctx, name, projects); err != nil {
			t.Fatal(err)
		}
	}
	auth := syncserver.NewEdgeAuth(edges, log, prometheus.NewRegistry())
	srv := syncserver.NewServer(postgres.NewSnapshotStore(e.db), postgres.NewPersonStore(e.db), ingest.New(postgres.NewEventStore(e.db, log), log, nil),
		log, prometheus.NewRegistry(), syncserver.WithRelays(auth), syncserver.WithSessions(postgres.NewEdgeSessionStore(e.db), "00000000-0000-0000-0000-000000000001"))
	client := serveAuthenticated(t, auth, srv)
	asRelay := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+relayToken)

	list, err := client.ListEdges(asRelay, &syncpb.ListEdgesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int64{}
	for _, le := range list.Edges {
		if le.AllProjects {
			t.Errorf("%s may receive every project through a relay scoped to one", le.Name)
		}
		got[le.Name] = le.Projects
	}
	if len(got) != 3 || len(got["all"]) != 1 || got["all"][0] != e.project || len(got["both"]) != 1 || got["relay"] == nil {
		t.Errorf("listed %v: want relay, all and both, each with the relay's project alone", got)
	}
	again, err := client.ListEdges(asRelay, &syncpb.ListEdgesRequest{Fingerprint: list.Fingerprint})
	if err != nil || !again.Unchanged || len(again.Edges) != 0 {
		t.Errorf("the same list asked again: %v %v, want unchanged", again, err)
	}

	if _, err := client.ReportSessions(asRelay, &syncpb.ReportSessionsRequest{SessionId: "not-a-uuid"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a report with a bad session id: %v, want InvalidArgument", err)
	}
	if _, err := client.ReportSessions(asRelay, &syncpb.ReportSessionsRequest{SessionId: "00000000-0000-0000-0000-0000000000aa"}); status.Code(err) != codes.NotFound {
		t.Errorf("a report hung off no session: %v, want NotFound", err)
	}
}
