package state_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// ackServer speaks the sync protocol as a control plane that tracks rollouts: it names a
// session, sends one snapshot with the acknowledgement delay it was given, and reports when it sent it
// and each acknowledgement.
type ackServer struct {
	syncpb.UnimplementedSyncServer
	delayMs  uint32
	deflated []*syncpb.DeflatedSnapshot // sent instead of the snapshot when set
	sentAt   chan time.Time
	acks     chan ack
}

type ack struct{ versions map[int64]int64 }

func (s *ackServer) Watch(_ *syncpb.WatchRequest, stream syncpb.Sync_WatchServer) error {
	if err := stream.Send(&syncpb.WatchResponse{SessionId: "s1", AckDelayMs: s.delayMs}); err != nil {
		return err
	}
	msg := &syncpb.WatchResponse{AckDelayMs: s.delayMs, InitialSyncDone: true, DeflatedSnapshots: s.deflated}
	if s.deflated == nil {
		msg.Snapshots = []*syncpb.ProjectSnapshot{snapshot(1, 7, "phc_a", `{"groups": [{}]}`)}
	}
	now := time.Now()
	if err := stream.Send(msg); err != nil {
		return err
	}
	s.sentAt <- now
	<-stream.Context().Done()
	return nil
}

func (s *ackServer) Acknowledge(_ context.Context, req *syncpb.AcknowledgeRequest) (*syncpb.AcknowledgeResponse, error) {
	s.acks <- ack{versions: req.Versions}
	return &syncpb.AcknowledgeResponse{}, nil
}

// TestAcknowledgementsWaitAsAsked checks that an edge acknowledges at once when the control
// plane asks for no delay (a rollout to a few edges is confirmed in milliseconds), and
// otherwise waits between the delay and twice it (thousands of edges do not all call back
// while the change is still being sent).
func TestAcknowledgementsWaitAsAsked(t *testing.T) {
	for _, tc := range []struct {
		delayMs  uint32
		min, max time.Duration
	}{
		{delayMs: 0, min: 0, max: 250 * time.Millisecond},
		{delayMs: 300, min: 300 * time.Millisecond, max: 600*time.Millisecond + 250*time.Millisecond},
	} {
		srv := &ackServer{delayMs: tc.delayMs, sentAt: make(chan time.Time, 1), acks: make(chan ack, 4)}
		_, stop := watchAgainst(t, srv)
		sent := <-srv.sentAt
		select {
		case a := <-srv.acks:
			after := time.Since(sent)
			if a.versions[1] != 7 {
				t.Errorf("delay %d ms: acknowledged %v, want project 1 at version 7", tc.delayMs, a.versions)
			}
			if after < tc.min || after > tc.max {
				t.Errorf("delay %d ms: acknowledged %s after the snapshot, want between %s and %s", tc.delayMs, after, tc.min, tc.max)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("delay %d ms: no acknowledgement", tc.delayMs)
		}
		stop()
	}
}

// watchAgainst runs an edge's Watch against srv until stop is called.
func watchAgainst(t *testing.T, srv *ackServer) (h *state.Holder, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	syncpb.RegisterSyncServer(g, srv)
	go g.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h = state.NewHolder(t.TempDir(), log, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		state.Watch(ctx, syncpb.NewSyncClient(conn), h, nil, "edge-1", log)
	}()
	return h, func() {
		cancel()
		<-done
		conn.Close()
		g.Stop()
	}
}

// TestDeflatedSnapshotsApplied: the edge inflates the deflated snapshots it is sent, applies
// them and acknowledges them; one that does not inflate is left out (reported), the rest of
// the message applied.
func TestDeflatedSnapshotsApplied(t *testing.T) {
	good, err := syncpb.Deflate(snapshot(1, 7, "phc_a", `{"groups": [{}]}`))
	if err != nil {
		t.Fatal(err)
	}
	corrupt := &syncpb.DeflatedSnapshot{ProjectId: 2, Version: 3, Deflated: []byte("not deflate")}
	srv := &ackServer{deflated: []*syncpb.DeflatedSnapshot{corrupt, good}, sentAt: make(chan time.Time, 1), acks: make(chan ack, 4)}
	h, stop := watchAgainst(t, srv)
	defer stop()
	<-srv.sentAt
	select {
	case a := <-srv.acks:
		if len(a.versions) != 1 || a.versions[1] != 7 {
			t.Errorf("acknowledged %v, want project 1 at version 7 alone", a.versions)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no acknowledgement")
	}
	if p := h.ByID(1); p == nil || p.Version != 7 || h.ByToken("phc_a") == nil {
		t.Errorf("project 1 after a deflated snapshot: %+v", p)
	}
	if h.ByID(2) != nil {
		t.Error("a snapshot that does not inflate was applied")
	}
}
