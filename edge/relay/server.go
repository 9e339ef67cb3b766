package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	gproto "google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// snapshotsPerMessage bounds a Watch message, as the control plane does: a catch-up of many
// projects goes in several messages.
const snapshotsPerMessage = 64

// Server is the sync service a relay serves the edges behind it: snapshots from what it
// holds, the rest passed on to its upstream.
type Server struct {
	syncpb.UnimplementedSyncServer
	upstream  syncpb.SyncClient
	holder    *state.Holder
	snapshots *Snapshots
	members   *Members
	auth      *Auth
	sessions  *Sessions
	spool     *spool.Spool
	log       *slog.Logger

	watching   atomic.Int64 // the streams open now: the acknowledgement delay
	fanout     fanout       // how long a change takes to reach them: the delay too
	onWatching func(streams int64)
}

// NewServer returns the relay's sync service. Events the upstream cannot take at once are
// appended to sp, which the relay's forwarder drains upstream.
func NewServer(upstream syncpb.SyncClient, h *state.Holder, snaps *Snapshots, members *Members, auth *Auth, sessions *Sessions, sp *spool.Spool, log *slog.Logger) *Server {
	return &Server{upstream: upstream, holder: h, snapshots: snaps, members: members, auth: auth, sessions: sessions, spool: sp, log: log}
}

// OnWatching calls f with the number of Watch streams open whenever one opens or ends: each
// holds some 50 KB of the relay's memory (the gRPC connection's floor), which the edge's
// memory limit must make room for. Call it before serving.
func (s *Server) OnWatching(f func(streams int64)) { s.onWatching = f }

// streamsChanged counts a Watch stream opened (+1) or ended (-1).
func (s *Server) streamsChanged(delta int64) {
	n := s.watching.Add(delta)
	if s.onWatching != nil {
		s.onWatching(n)
	}
}

// GRPCServer returns a gRPC server of the relay's sync service, admitting live edges only.
func (s *Server) GRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.ChainUnaryInterceptor(s.auth.UnaryInterceptor()), grpc.ChainStreamInterceptor(s.auth.StreamInterceptor()))
	g := grpc.NewServer(opts...)
	syncpb.RegisterSyncServer(g, s)
	return g
}

// ackDelayPerStream is what the relay asks per stream, whatever it measured of a change
// reaching its edges (fanout, which sees its own sends return, not the edges receive): the
// edges' acknowledgements, each a call, must not compete with the change still being sent.
// Measured with 2,500 edges behind each of four relays sharing two cores with their edges,
// the change reached the last edge 390 ms after it was made when no edge acknowledged
// (156 µs a stream); asking 80 µs, the edges reached first acknowledged from 200 ms on and
// the last edges had the change after 1.4-1.8 s instead (bench/RESULTS.md, round 3).
const (
	ackDelayPerStream = 160 * time.Microsecond
	maxAckDelay       = 5 * time.Second
)

func (s *Server) ackDelayMs() uint32 {
	d := max(time.Duration(s.watching.Load())*ackDelayPerStream, s.fanout.took())
	return uint32(min(d, maxAckDelay) / time.Millisecond)
}

// Watch streams the relay's snapshots to an edge: first whatever it lacks (once the relay
// holds a complete set: caught up with its upstream, or read from its disk), then every
// change. The snapshots go as the bytes the relay received.
func (s *Server) Watch(req *syncpb.WatchRequest, stream syncpb.Sync_WatchServer) error {
	if req.ProtocolVersion != syncpb.ProtocolVersion_PROTOCOL_VERSION_1 {
		return status.Errorf(codes.FailedPrecondition, "unsupported protocol version %d", req.ProtocolVersion)
	}
	ctx := stream.Context()
	edge := caller(ctx)
	s.streamsChanged(1)
	defer s.streamsChanged(-1)
	projects, ready, changed, at := s.snapshots.view()
	for !ready {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
		projects, ready, changed, at = s.snapshots.view()
	}
	dbID := s.holder.DatabaseID()
	sent := make(map[int64]int64, len(req.KnownVersions))
	for id, v := range req.KnownVersions {
		if req.DatabaseId != dbID {
			v = 0 // another database's versions mean nothing here
		}
		sent[id] = v
	}
	session := uuid.NewString()
	replaces := ""
	if _, err := uuid.Parse(req.PreviousSessionId); err == nil {
		replaces = req.PreviousSessionId
	}
	s.sessions.open(session, edge.Name, req.EdgeId, replaces)
	defer s.sessions.close(session)
	s.log.Info("edge watching through this relay", "edge", edge.Name, "edge_id", req.EdgeId, "known_projects", len(req.KnownVersions))
	// The reset drops any filters the edge kept from its last stream (it may have missed
	// additions since); the relay's filters follow the catch-up, as the control plane's do.
	if err := stream.Send(&syncpb.WatchResponse{DatabaseId: dbID, SessionId: session, AckDelayMs: s.ackDelayMs(),
		MembershipReset: true}); err != nil {
		return err
	}
	initial := true
	fresh := false // projects is a change the relay just received: its send is timed (fanout)
	var cursor Cursor
	for {
		if err := s.send(stream, edge, sent, projects, initial); err != nil {
			return err
		}
		if fresh {
			s.fanout.sent(at)
		}
		initial, fresh = false, false
		var membersChanged <-chan struct{}
		var err error
		if cursor, membersChanged, err = s.sendMembers(stream, edge, cursor); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-membersChanged:
		case <-changed:
		}
		select {
		case <-changed: // snapshots that changed too go first: the upstream sent them earlier
		default:
			continue // only membership changed
		}
		if s.holder.DatabaseID() != dbID {
			// The relay's upstream replaced its database: the edge starts afresh with its
			// identity, as it would with the control plane.
			return status.Error(codes.Unavailable, "the relay's upstream database changed: reconnect")
		}
		projects, _, changed, at = s.snapshots.view()
		fresh = true
	}
}

// sendMembers sends the edge the membership changes since cur of the projects it may
// receive, after the snapshots sent before them, and returns its next cursor and the channel
// closed at the next change.
func (s *Server) sendMembers(stream syncpb.Sync_WatchServer, edge *syncpb.LiveEdge, cur Cursor) (Cursor, <-chan struct{}, error) {
	fields, reset, next, changed := s.members.since(cur, func(id int64) bool { return serves(edge, id) })
	if err := syncpb.SendMembership(stream, reset, fields); err != nil {
		return cur, nil, err
	}
	return next, changed, nil
}

// send makes the edge hold exactly the relay's projects that it may receive: every one whose
// version differs from what it holds, and the removal of those the relay does not hold.
func (s *Server) send(stream syncpb.Sync_WatchServer, edge *syncpb.LiveEdge, sent map[int64]int64, projects map[int64]*encoded, initial bool) error {
	msg := &syncpb.WatchResponse{}
	for id := range sent {
		if _, ok := projects[id]; !ok || !serves(edge, id) {
			msg.RemovedProjects = append(msg.RemovedProjects, id)
			delete(sent, id)
		}
	}
	var parts [][]byte
	flush := func(last bool) error {
		if !last && len(parts) < snapshotsPerMessage {
			return nil
		}
		if len(parts) == 0 && len(msg.RemovedProjects) == 0 && !(last && initial) {
			return nil
		}
		msg.InitialSyncDone = last && initial
		if len(parts) > 0 {
			msg.AckDelayMs = s.ackDelayMs()
		}
		head, err := gproto.Marshal(msg)
		if err != nil {
			return status.Errorf(codes.Internal, "encode watch response: %v", err)
		}
		if err := stream.SendMsg(&syncpb.EncodedResponse{Parts: append([][]byte{head}, parts...)}); err != nil {
			return err
		}
		*msg, parts = syncpb.WatchResponse{}, nil
		return nil
	}
	for id, e := range projects {
		if v, ok := sent[id]; (ok && v == e.version) || !serves(edge, id) {
			continue
		}
		parts = append(parts, e.field)
		sent[id] = e.version
		if err := flush(false); err != nil {
			return err
		}
	}
	return flush(true)
}

// Acknowledge records which versions an edge served here serves; the relay reports it
// upstream with the next batch.
func (s *Server) Acknowledge(ctx context.Context, req *syncpb.AcknowledgeRequest) (*syncpb.AcknowledgeResponse, error) {
	if !s.sessions.acknowledge(caller(ctx).Name, req) {
		return nil, status.Error(codes.NotFound, "no such session: its stream has ended")
	}
	return &syncpb.AcknowledgeResponse{}, nil
}

// ReportSessions takes the report of a relay behind this one, passed on upstream with this
// relay's own.
func (s *Server) ReportSessions(ctx context.Context, req *syncpb.ReportSessionsRequest) (*syncpb.ReportSessionsResponse, error) {
	unknown, ok := s.sessions.report(caller(ctx).Name, req)
	if !ok {
		return nil, status.Error(codes.NotFound, "no such session: the relay's stream has ended")
	}
	return &syncpb.ReportSessionsResponse{Unknown: unknown}, nil
}

// ListEdges answers a relay behind this one from this relay's list of live edges, each
// with what it may receive through both.
func (s *Server) ListEdges(ctx context.Context, req *syncpb.ListEdgesRequest) (*syncpb.ListEdgesResponse, error) {
	edges := s.auth.list(caller(ctx))
	fp := syncpb.FingerprintLiveEdges(edges)
	if string(fp) == string(req.Fingerprint) {
		return &syncpb.ListEdgesResponse{Unchanged: true, Fingerprint: fp}, nil
	}
	return &syncpb.ListEdgesResponse{Fingerprint: fp, Edges: edges}, nil
}

// checkScope refuses a call about a project the edge may not receive through this relay.
func checkScope(ctx context.Context, projectID int64) error {
	if serves(caller(ctx), projectID) {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "this edge is not served project %d", projectID)
}

// LookupPerson asks the upstream.
func (s *Server) LookupPerson(ctx context.Context, req *syncpb.LookupPersonRequest) (*syncpb.LookupPersonResponse, error) {
	if err := checkScope(ctx, req.ProjectId); err != nil {
		return nil, err
	}
	return s.upstream.LookupPerson(ctx, req)
}

// LookupGroups asks the upstream.
func (s *Server) LookupGroups(ctx context.Context, req *syncpb.LookupGroupsRequest) (*syncpb.LookupGroupsResponse, error) {
	if err := checkScope(ctx, req.ProjectId); err != nil {
		return nil, err
	}
	return s.upstream.LookupGroups(ctx, req)
}

// SetHashKeyOverrides asks the upstream.
func (s *Server) SetHashKeyOverrides(ctx context.Context, req *syncpb.SetHashKeyOverridesRequest) (*syncpb.SetHashKeyOverridesResponse, error) {
	if err := checkScope(ctx, req.ProjectId); err != nil {
		return nil, err
	}
	return s.upstream.SetHashKeyOverrides(ctx, req)
}

// ReportEvaluations passes the counts of the projects the edge may receive upstream.
func (s *Server) ReportEvaluations(ctx context.Context, req *syncpb.ReportEvaluationsRequest) (*syncpb.ReportEvaluationsResponse, error) {
	edge := caller(ctx)
	kept := req.Evaluations[:0:0]
	for _, e := range req.Evaluations {
		if serves(edge, e.ProjectId) {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		return &syncpb.ReportEvaluationsResponse{}, nil
	}
	return s.upstream.ReportEvaluations(ctx, &syncpb.ReportEvaluationsRequest{EdgeId: req.EdgeId, Evaluations: kept})
}

// ingestUpstreamTimeout bounds the wait for the upstream to store an edge's events before
// the relay spools them instead.
const ingestUpstreamTimeout = 5 * time.Second

// Ingest stores an edge's events upstream, or, when the upstream cannot take them now,
// appends them to the relay's spool (as durable as its --spool-fsync promises), which the
// relay forwards upstream later: either way the edge drops them only once they are safe. A
// batch of a project the edge may not receive fails the call for good (FailedPrecondition),
// as the control plane's would, so that the edge dead-letters it and stores the rest.
func (s *Server) Ingest(ctx context.Context, req *syncpb.IngestRequest) (*syncpb.IngestResponse, error) {
	edge := caller(ctx)
	for _, raw := range req.Batches {
		var b syncpb.EventBatch
		if err := gproto.Unmarshal(raw, &b); err != nil || !serves(edge, b.ProjectId) {
			return nil, status.Errorf(codes.FailedPrecondition, "this edge is not served project %d: its events are refused", b.ProjectId)
		}
	}
	upCtx, cancel := context.WithTimeout(ctx, ingestUpstreamTimeout)
	resp, err := s.upstream.Ingest(upCtx, req, grpc.MaxCallSendMsgSize(64<<20))
	cancel()
	switch status.Code(err) {
	case codes.OK:
		return resp, nil
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition, codes.DataLoss, codes.PermissionDenied:
		return nil, err // refused for good upstream: the edge dead-letters what it must
	}
	if ctx.Err() != nil {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if aerr := s.spool.Append(req.Batches...); aerr != nil {
		if errors.Is(aerr, spool.ErrFull) {
			return nil, status.Error(codes.ResourceExhausted, "the relay's spool is full: retry later")
		}
		return nil, status.Errorf(codes.Unavailable, "spool at the relay: %v", aerr)
	}
	s.log.Debug("upstream unavailable; events spooled at the relay", "batches", len(req.Batches), "err", err)
	return &syncpb.IngestResponse{}, nil
}
