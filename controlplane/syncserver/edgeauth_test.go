package syncserver_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/syncserver"
	"github.com/flagedge/flagedge/shared/syncpb"
)

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
	srv := syncserver.NewServer(postgres.NewSnapshotStore(e.db), postgres.NewPersonStore(e.db), postgres.NewEventStore(e.db, log), log, prometheus.NewRegistry())
	g := grpc.NewServer(grpc.UnaryInterceptor(auth.UnaryInterceptor()), grpc.StreamInterceptor(auth.StreamInterceptor()))
	syncpb.RegisterSyncServer(g, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := syncpb.NewSyncClient(conn)

	// Issued after the server started: accepted without waiting for the next refresh.
	_, token, err := edges.CreateEdge(ctx, "edge-1")
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
