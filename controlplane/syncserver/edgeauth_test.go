package syncserver_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/bloomhub"
	"github.com/flagedge/flagedge/controlplane/ingest"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/syncserver"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// serveAuthenticated serves srv behind auth over gRPC on 127.0.0.1 until the test ends, and
// returns a client of it.
func serveAuthenticated(t *testing.T, auth *syncserver.EdgeAuth, srv *syncserver.Server) syncpb.SyncClient {
	t.Helper()
	g := grpc.NewServer(append(syncpb.ServerOptions(false), grpc.UnaryInterceptor(auth.UnaryInterceptor()), grpc.StreamInterceptor(auth.StreamInterceptor()))...)
	syncpb.RegisterSyncServer(g, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return syncpb.NewSyncClient(conn)
}

// TestEdgeAuthentication: the sync service answers only edges with a live token; a revoked
// edge's stream is closed within a second, with Unauthenticated.
func TestEdgeAuthentication(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	edges := postgres.NewEdgeService(e.db)
	auth := syncserver.NewEdgeAuth(edges, log, prometheus.NewRegistry())
	auth.RefreshInterval = 100 * time.Millisecond
	go auth.Run(ctx)
	srv := syncserver.NewServer(postgres.NewSnapshotStore(e.db), postgres.NewPersonStore(e.db), ingest.New(postgres.NewEventStore(e.db, log), log, nil), log, prometheus.NewRegistry())
	client := serveAuthenticated(t, auth, srv)

	// Issued after the server started: accepted without waiting for the next refresh.
	_, token, err := edges.CreateEdge(ctx, "edge-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	with := func(tok string) context.Context {
		if tok == "" {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	for name, tok := range map[string]string{"no token": "", "unknown token": "fle_nope"} {
		if _, err := client.LookupPerson(with(tok), &syncpb.LookupPersonRequest{ProjectId: e.project, DistinctId: "u"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("look-up with %s: %v, want Unauthenticated", name, err)
		}
		if _, err := client.Ingest(with(tok), &syncpb.IngestRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("ingest with %s: %v, want Unauthenticated", name, err)
		}
		stream, err := client.Watch(with(tok), &syncpb.WatchRequest{ProtocolVersion: syncpb.ProtocolVersion_PROTOCOL_VERSION_1})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("watch with %s: %v, want Unauthenticated and no snapshot", name, err)
		}
	}
	time.Sleep(60 * time.Millisecond) // past the reload limit the refused calls used up
	if _, err := client.LookupPerson(with(token), &syncpb.LookupPersonRequest{ProjectId: e.project, DistinctId: "u"}); err != nil {
		t.Fatalf("look-up with a live token: %v", err)
	}
	stream, err := client.Watch(with(token), &syncpb.WatchRequest{ProtocolVersion: syncpb.ProtocolVersion_PROTOCOL_VERSION_1})
	if err != nil {
		t.Fatal(err)
	}
	if msg, err := recvCatchUp(stream); err != nil || len(msg.Snapshots) == 0 {
		t.Fatalf("watch with a live token: %v %v", msg, err)
	}
	if err := edges.RevokeEdge(ctx, "edge-1"); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for {
		_, err := stream.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("the revoked edge's stream ended with %v, want Unauthenticated", err)
		}
		break
	}
	if d := time.Since(revoked); d > time.Second {
		t.Errorf("the revoked edge's stream lasted %v, want under 1s", d)
	}
	if _, err := client.LookupPerson(with(token), &syncpb.LookupPersonRequest{ProjectId: e.project, DistinctId: "u"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("look-up with a revoked token: %v, want Unauthenticated", err)
	}
}

// TestScopedEdge: an edge issued for some projects is sent only their snapshots and
// membership filters, and its look-ups and events of other projects are refused; an edge
// issued without projects is served them all.
func TestScopedEdge(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var orgID int64
	if err := e.db.Pool.QueryRow(ctx, `SELECT organization_id FROM projects WHERE id = $1`, e.project).Scan(&orgID); err != nil {
		t.Fatal(err)
	}
	other, err := postgres.NewProjectService(e.db).CreateProject(controlplane.NewContextWithUser(ctx, &controlplane.User{OrganizationID: orgID}), orgID, "other")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	edges := postgres.NewEdgeService(e.db)
	if _, _, err := edges.CreateEdge(ctx, "bad", []int64{e.project, other.ID + 1000}); controlplane.ErrorKind(err) != controlplane.Invalid {
		t.Errorf("an edge scoped to a project that does not exist: %v, want Invalid", err)
	}
	scoped, scopedToken, err := edges.CreateEdge(ctx, "scoped", []int64{e.project, e.project})
	if err != nil {
		t.Fatal(err)
	}
	if len(scoped.Projects) != 1 || scoped.Projects[0] != e.project {
		t.Errorf("scoped edge's projects = %v, want [%d]", scoped.Projects, e.project)
	}
	_, allToken, err := edges.CreateEdge(ctx, "all", nil)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := edges.FindEdges(ctx)
	if err != nil || len(listed) != 2 || len(listed[0].Projects) != 1 || listed[1].Projects != nil {
		t.Fatalf("FindEdges = %v %v, want the scoped edge with one project and the other with none", listed, err)
	}

	auth := syncserver.NewEdgeAuth(edges, log, prometheus.NewRegistry())
	go auth.Run(ctx)
	hub := bloomhub.NewHub(postgres.NewMemberStore(e.db), log, prometheus.NewRegistry())
	if err := hub.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	srv := syncserver.NewServer(postgres.NewSnapshotStore(e.db), postgres.NewPersonStore(e.db), ingest.New(postgres.NewEventStore(e.db, log), log, nil), log,
		prometheus.NewRegistry(), syncserver.WithMembership(hub))
	client := serveAuthenticated(t, auth, srv)
	with := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}

	// watched returns the projects of the snapshots and of the membership filters a stream
	// with the token is sent; the edge claims to hold the other project already, which a
	// scoped edge must be told to remove.
	watched := func(tok string) (snapshots, filters map[int64]bool, removed []int64) {
		t.Helper()
		sctx, scancel := context.WithTimeout(with(tok), 10*time.Second)
		defer scancel()
		stream, err := client.Watch(sctx, &syncpb.WatchRequest{ProtocolVersion: syncpb.ProtocolVersion_PROTOCOL_VERSION_1,
			KnownVersions: map[int64]int64{other.ID: 1}})
		if err != nil {
			t.Fatal(err)
		}
		snapshots, filters = map[int64]bool{}, map[int64]bool{}
		for done := false; !done || len(filters) == 0; {
			msg, err := stream.Recv()
			if err != nil {
				t.Fatalf("watch: %v (so far snapshots %v, filters %v)", err, snapshots, filters)
			}
			for _, s := range msg.Snapshots {
				snapshots[s.ProjectId] = true
			}
			for _, f := range msg.MembershipFilters {
				filters[f.ProjectId] = true
			}
			removed = append(removed, msg.RemovedProjects...)
			done = done || msg.InitialSyncDone
		}
		return snapshots, filters, removed
	}
	snaps, filters, removed := watched(scopedToken)
	if len(snaps) != 1 || !snaps[e.project] || len(filters) != 1 || !filters[e.project] {
		t.Errorf("scoped edge was sent snapshots %v and filters %v, want project %d's only", snaps, filters, e.project)
	}
	if len(removed) != 1 || removed[0] != other.ID {
		t.Errorf("scoped edge was told to remove %v, want [%d] (it claimed to hold it)", removed, other.ID)
	}
	snaps, filters, _ = watched(allToken)
	if len(snaps) != 2 || len(filters) != 2 {
		t.Errorf("unscoped edge was sent snapshots %v and filters %v, want both projects'", snaps, filters)
	}

	if _, err := client.LookupPerson(with(scopedToken), &syncpb.LookupPersonRequest{ProjectId: other.ID, DistinctId: "u"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("scoped edge's person look-up in another project: %v, want PermissionDenied", err)
	}
	if _, err := client.LookupGroups(with(scopedToken), &syncpb.LookupGroupsRequest{ProjectId: other.ID}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("scoped edge's group look-up in another project: %v, want PermissionDenied", err)
	}
	if _, err := client.SetHashKeyOverrides(with(scopedToken), &syncpb.SetHashKeyOverridesRequest{ProjectId: other.ID, DistinctId: "u", HashKey: "h"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("scoped edge's overrides in another project: %v, want PermissionDenied", err)
	}
	if _, err := client.LookupPerson(with(scopedToken), &syncpb.LookupPersonRequest{ProjectId: e.project, DistinctId: "u"}); err != nil {
		t.Errorf("scoped edge's look-up in its project: %v", err)
	}
	batch := func(project int64) []byte {
		raw, err := proto.Marshal(&syncpb.EventBatch{ProjectId: project, Events: []*syncpb.CapturedEvent{{Uuid: uuid.NewString(),
			Event: "e", DistinctId: "d", Properties: []byte(`{}`), TimestampUs: time.Now().UnixMicro(), ReceivedUs: time.Now().UnixMicro()}}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	_, err = client.Ingest(with(scopedToken), &syncpb.IngestRequest{EdgeId: "scoped", Batches: [][]byte{batch(e.project), batch(other.ID)}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("scoped edge's events of another project: %v, want FailedPrecondition", err)
	}
	var stored int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&stored); err != nil || stored != 0 {
		t.Errorf("after the refused call %d events are stored (%v), want none", stored, err)
	}
	// A batch naming the edge's project, then another (protobuf takes the last): refused,
	// and nothing is stored in either project. Before one decoder read the project for both
	// the check and the store, the check read the first and the store the last.
	smuggled := append(protowire.AppendVarint(protowire.AppendTag(nil, syncpb.EventBatchProjectID, protowire.VarintType), uint64(e.project)), batch(other.ID)...)
	if n := proto.Unmarshal(smuggled, new(syncpb.EventBatch)); n != nil {
		t.Fatal(n)
	}
	smuggledBack := append(batch(other.ID), protowire.AppendVarint(protowire.AppendTag(nil, syncpb.EventBatchProjectID, protowire.VarintType), uint64(e.project))...)
	for name, raw := range map[string][]byte{"own project, then another": smuggled, "another, then own": smuggledBack} {
		_, err = client.Ingest(with(scopedToken), &syncpb.IngestRequest{EdgeId: "scoped", Batches: [][]byte{raw}})
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("scoped edge's batch naming two projects (%s): %v, want FailedPrecondition", name, err)
		}
	}
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&stored); err != nil || stored != 0 {
		t.Errorf("after batches naming two projects %d events are stored (%v), want none", stored, err)
	}
	if res, err := client.Ingest(with(scopedToken), &syncpb.IngestRequest{EdgeId: "scoped", Batches: [][]byte{batch(e.project)}}); err != nil || res.Stored != 1 {
		t.Errorf("scoped edge's events of its project: %v %v, want 1 stored", res, err)
	}
	if res, err := client.Ingest(with(allToken), &syncpb.IngestRequest{EdgeId: "all", Batches: [][]byte{batch(other.ID)}}); err != nil || res.Stored != 1 {
		t.Errorf("unscoped edge's events: %v %v, want 1 stored", res, err)
	}
}
