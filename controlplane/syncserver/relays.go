package syncserver

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// WithRelays lets edges serve edges (edge --serve-edges): they learn the live edges of auth
// to check their downstream edges' tokens (ListEdges), and report those edges' sessions
// (ReportSessions, recorded with WithSessions). Without it both calls answer Unimplemented.
func WithRelays(auth *EdgeAuth) Option { return func(s *Server) { s.relays = auth } }

// listEdgesFreshness is how old the live edges may be when a relay asks: it polls every
// 200 ms, and a token revoked must be refused behind it within a second of the revocation.
const listEdgesFreshness = 200 * time.Millisecond

// ListEdges returns the live edges, each with the projects it may receive through the
// calling relay: its own projects' intersection with the relay's. An edge that may receive
// none through it is left out.
func (s *Server) ListEdges(ctx context.Context, req *syncpb.ListEdgesRequest) (*syncpb.ListEdgesResponse, error) {
	if s.relays == nil {
		return nil, status.Error(codes.Unimplemented, "this control plane does not serve relays")
	}
	caller, _ := ctx.Value(edgeKey{}).(*controlplane.Edge)
	if err := s.relays.reload(ctx, listEdgesFreshness); err != nil {
		s.log.Warn("read live edges", "err", err)
	}
	live := *s.relays.live.Load()
	out := &syncpb.ListEdgesResponse{}
	for sum, e := range live {
		le := &syncpb.LiveEdge{TokenSha256: sum[:], Id: e.ID, Name: e.Name}
		switch {
		case caller == nil || caller.Projects == nil:
			le.AllProjects, le.Projects = e.Projects == nil, e.Projects
		case e.Projects == nil:
			le.Projects = caller.Projects
		default:
			for _, p := range e.Projects {
				if slices.Contains(caller.Projects, p) {
					le.Projects = append(le.Projects, p)
				}
			}
		}
		if !le.AllProjects && len(le.Projects) == 0 {
			continue
		}
		out.Edges = append(out.Edges, le)
	}
	syncpb.SortLiveEdges(out.Edges)
	out.Fingerprint = syncpb.FingerprintLiveEdges(out.Edges)
	if string(out.Fingerprint) == string(req.Fingerprint) {
		return &syncpb.ListEdgesResponse{Unchanged: true, Fingerprint: out.Fingerprint}, nil
	}
	return out, nil
}

// maxReportedSessions bounds what one ReportSessions call may carry.
const maxReportedSessions = 10_000

// ReportSessions records what a relay reports of the sessions behind it.
func (s *Server) ReportSessions(ctx context.Context, req *syncpb.ReportSessionsRequest) (*syncpb.ReportSessionsResponse, error) {
	if s.relays == nil {
		return nil, status.Error(codes.Unimplemented, "this control plane does not serve relays")
	}
	if s.sessions == nil {
		return &syncpb.ReportSessionsResponse{}, nil
	}
	if len(req.Opened)+len(req.Closed)+len(req.Acknowledgements) > maxReportedSessions {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d sessions per report", maxReportedSessions)
	}
	var err error
	r := controlplane.RelayReport{Relay: edgeName(ctx), Replica: s.replicaName()}
	if r.Session, err = sessionID(req.SessionId); err != nil || r.Session == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id is not a session's id")
	}
	for _, o := range req.Opened {
		op := controlplane.RelayedOpening{EdgeName: o.EdgeName, EdgeID: o.EdgeId}
		for _, f := range []struct {
			in  string
			out *string
		}{{o.Id, &op.ID}, {o.ParentId, &op.Parent}, {o.Replaces, &op.Replaces}} {
			if *f.out, err = sessionID(f.in); err != nil {
				return nil, err
			}
		}
		if op.ID == "" || op.EdgeName == "" {
			return nil, status.Error(codes.InvalidArgument, "an opened session needs an id and an edge name")
		}
		r.Opened = append(r.Opened, op)
	}
	for _, a := range req.Acknowledgements {
		id, err := sessionID(a.SessionId)
		if err != nil || id == "" {
			return nil, status.Error(codes.InvalidArgument, "an acknowledgement's session_id is not a session's id")
		}
		r.Acks = append(r.Acks, controlplane.Acknowledgement{SessionID: id, Versions: a.Versions, Removed: a.RemovedProjects})
	}
	for _, id := range req.Closed {
		if id, err := sessionID(id); err == nil && id != "" {
			r.Closed = append(r.Closed, id)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, sessionWriteTimeout)
	defer cancel()
	unknown, err := s.sessions.ReportRelayed(ctx, r)
	if controlplane.ErrorKind(err) == controlplane.NotFound {
		return nil, status.Error(codes.NotFound, "no such session: the relay's stream has ended")
	}
	if err != nil {
		return nil, s.unavailable("report relayed sessions", err)
	}
	return &syncpb.ReportSessionsResponse{Unknown: unknown}, nil
}

// sessionID returns id in uuid's canonical form; "" stays "".
func sessionID(id string) (string, error) {
	if id == "" {
		return "", nil
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return "", status.Errorf(codes.InvalidArgument, "%q is not a session's id", id)
	}
	return u.String(), nil
}
