package syncserver

import (
	"context"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// WithSessions makes the server record every Watch stream as a session of store, served by
// this replica (replicaID: this process, unique), and take the edges' acknowledgements of
// the versions they serve. Without it Watch streams carry no session id and
// acknowledgements are ignored.
func WithSessions(store controlplane.EdgeSessionStore, replicaID string) Option {
	return func(s *Server) { s.sessions, s.replicaID = store, replicaID }
}

// SetReplicaName names this replica in the edges' list (its host and the address it serves
// on, known once it listens); sessions opened from then on carry it.
func (s *Server) SetReplicaName(name string) { s.replica.Store(&name) }

func (s *Server) replicaName() string {
	if p := s.replica.Load(); p != nil {
		return *p
	}
	return s.replicaID
}

// sessionWriteTimeout bounds the session writes a stream makes as it opens and closes.
const sessionWriteTimeout = 5 * time.Second

// openSession records the stream as a session, after forgetting the one it replaces. It
// returns the session's id ("" without sessions) and the function that closes it.
func (s *Server) openSession(ctx context.Context, req *syncpb.WatchRequest) (string, func(), error) {
	if s.sessions == nil {
		return "", func() {}, nil
	}
	name := edgeName(ctx)
	if prev := req.PreviousSessionId; prev != "" {
		if _, err := uuid.Parse(prev); err == nil {
			if err := s.sessions.ReplaceSession(ctx, prev, name); err != nil {
				return "", nil, err
			}
		}
	}
	id, err := s.sessions.OpenSession(ctx, s.replicaID, s.replicaName(), name, req.EdgeId)
	if err != nil {
		return "", nil, err
	}
	return id, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionWriteTimeout)
		defer cancel()
		if err := s.sessions.CloseSession(ctx, id); err != nil {
			// The session stops counting once no heartbeat marks it.
			s.log.Warn("close edge session", "session", id, "err", err)
		}
	}, nil
}

// maxAcknowledged bounds the projects one acknowledgement may name.
const maxAcknowledged = 100_000

// Acknowledge records the versions the edge serves now, for its stream's session.
func (s *Server) Acknowledge(ctx context.Context, req *syncpb.AcknowledgeRequest) (*syncpb.AcknowledgeResponse, error) {
	if s.sessions == nil {
		return &syncpb.AcknowledgeResponse{}, nil
	}
	if _, err := uuid.Parse(req.SessionId); err != nil {
		return nil, status.Error(codes.InvalidArgument, "session_id is not a session's id")
	}
	if len(req.Versions)+len(req.RemovedProjects) > maxAcknowledged {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d projects per acknowledgement", maxAcknowledged)
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	err := s.sessions.Acknowledge(ctx, req.SessionId, edgeName(ctx), req.Versions, req.RemovedProjects)
	if controlplane.ErrorKind(err) == controlplane.NotFound {
		return nil, status.Error(codes.NotFound, "no such session: its stream has ended")
	}
	if err != nil {
		return nil, s.unavailable("acknowledge", err)
	}
	return &syncpb.AcknowledgeResponse{}, nil
}
