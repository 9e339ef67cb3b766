package relay_test

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/edge/relay"
	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// deflatedFast compresses a snapshot at another level than syncpb.Deflate, so that bytes a
// relay re-encoded would differ from those it received.
func deflatedFast(t *testing.T, pb *syncpb.ProjectSnapshot) *syncpb.DeflatedSnapshot {
	t.Helper()
	raw, err := proto.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestSpeed)
	w.Write(raw)
	w.Close()
	return &syncpb.DeflatedSnapshot{ProjectId: pb.ProjectId, Version: pb.Version, Deflated: buf.Bytes()}
}

func snapshot(id, version int64, token string) *syncpb.ProjectSnapshot {
	return &syncpb.ProjectSnapshot{ProjectId: id, Version: version, ApiToken: token, Name: "a project with a long enough name to compress",
		Flags: []*syncpb.Flag{{Id: 1, Key: "f", Active: true, Filters: []byte(`{"groups": [{"rollout_percentage": 100}]}`)}}}
}

// testRelay is a relay's sync service on 127.0.0.1, fed as the edge's Watch feeds it (apply).
type testRelay struct {
	h       *state.Holder
	snaps   *relay.Snapshots
	members *relay.Members
	addr    string
}

// relayFor starts a relay's sync service on 127.0.0.1 over a holder, with a list of live
// edges kept on disk (its upstream, at an address where nothing listens, never answers).
func relayFor(t *testing.T, edges ...*syncpb.LiveEdge) *testRelay {
	return relayIn(t, t.TempDir(), edges...)
}

// relayIn is relayFor keeping what the relay keeps on disk in dir.
func relayIn(t *testing.T, dir string, edges ...*syncpb.LiveEdge) *testRelay {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	live, _ := proto.Marshal(&syncpb.ListEdgesResponse{Edges: edges})
	if err := os.WriteFile(filepath.Join(dir, "live-edges.pb"), live, 0o600); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	upstream := syncpb.NewSyncClient(conn)
	r := &testRelay{h: state.NewHolder("", log, nil)}
	r.snaps = relay.NewSnapshots(r.h, log)
	r.members = relay.NewMembers(filepath.Join(dir, "membership.pb"), 0, log)
	t.Cleanup(r.members.Close)
	sp, err := spool.Open(spool.Options{Dir: filepath.Join(t.TempDir(), "spool"), QuotaBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	srv := relay.NewServer(upstream, r.h, r.snaps, r.members, relay.NewAuth(upstream, filepath.Join(dir, "live-edges.pb"), log),
		relay.NewSessions(upstream, log), sp, log).GRPCServer(syncpb.ServerOptions(false)...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	r.addr = ln.Addr().String()
	return r
}

// watch opens a Watch stream to addr with token.
func watch(t *testing.T, addr, token string) (syncpb.Sync_WatchClient, context.CancelFunc) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	stream, err := syncpb.NewSyncClient(conn).Watch(ctx, &syncpb.WatchRequest{ProtocolVersion: syncpb.ProtocolVersion_PROTOCOL_VERSION_1,
		EdgeId: "leaf", AcceptsDeflatedSnapshots: true})
	if err != nil {
		t.Fatal(err)
	}
	return stream, cancel
}

// TestRelayPassesReceivedBytes: an edge behind the relay gets the snapshots of the projects
// its token may receive as the relay received them, byte for byte, and a change as it comes;
// a token not in the relay's list of live edges gets nothing.
func TestRelayPassesReceivedBytes(t *testing.T) {
	sum := sha256.Sum256([]byte("fle_leaf"))
	r := relayFor(t, &syncpb.LiveEdge{TokenSha256: sum[:], Id: "e1", Name: "leaf", Projects: []int64{1}})
	one, two := deflatedFast(t, snapshot(1, 5, "phc_one")), deflatedFast(t, snapshot(2, 3, "phc_two"))
	received := &syncpb.WatchResponse{DeflatedSnapshots: []*syncpb.DeflatedSnapshot{one, two}, InitialSyncDone: true}
	r.apply(t, received)

	stream, cancel := watch(t, r.addr, "fle_leaf")
	defer cancel()
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if first.SessionId == "" || !first.MembershipReset {
		t.Errorf("first message %v: want a session and a membership reset", first)
	}
	msg, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.DeflatedSnapshots) != 1 || !msg.InitialSyncDone || !bytes.Equal(msg.DeflatedSnapshots[0].Deflated, one.Deflated) {
		t.Fatalf("catch-up %v: want project 1 alone, its received bytes, and the end of the catch-up", msg)
	}
	changed := deflatedFast(t, snapshot(1, 6, "phc_one"))
	r.apply(t, &syncpb.WatchResponse{DeflatedSnapshots: []*syncpb.DeflatedSnapshot{changed}})
	msg, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.DeflatedSnapshots) != 1 || msg.DeflatedSnapshots[0].Version != 6 || !bytes.Equal(msg.DeflatedSnapshots[0].Deflated, changed.Deflated) {
		t.Fatalf("change %v: want version 6 as received", msg)
	}

	refused, cancel2 := watch(t, r.addr, "fle_unknown")
	defer cancel2()
	if _, err := refused.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Errorf("an unknown token: %v, want Unauthenticated", err)
	}
}

// apply does what the edge's Watch does with a received message: the holder applies it
// inflated, then the tap (the relay's snapshots, then its membership filters) sees it as
// received.
func (r *testRelay) apply(t *testing.T, received *syncpb.WatchResponse) {
	t.Helper()
	inflated := &syncpb.WatchResponse{InitialSyncDone: received.InitialSyncDone}
	for _, d := range received.DeflatedSnapshots {
		pb, err := syncpb.Inflate(d, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		inflated.Snapshots = append(inflated.Snapshots, pb)
	}
	if err := r.h.Apply(inflated); err != nil {
		t.Fatal(err)
	}
	r.snaps.Tap(received)
	r.members.Tap(received)
}
