package syncserver

import (
	"context"
	"sync"
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
	return func(s *Server) { s.sessions, s.replicaID, s.acks.store = store, replicaID, store }
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
	err := s.acks.add(ctx, controlplane.Acknowledgement{SessionID: req.SessionId, EdgeName: edgeName(ctx),
		Versions: req.Versions, Removed: req.RemovedProjects})
	if controlplane.ErrorKind(err) == controlplane.NotFound {
		return nil, status.Error(codes.NotFound, "no such session: its stream has ended")
	}
	if err != nil {
		return nil, s.unavailable("acknowledge", err)
	}
	return &syncpb.AcknowledgeResponse{}, nil
}

// maxAcksPerWrite bounds the acknowledgements written in one transaction.
const maxAcksPerWrite = 2000

// ackBatcher writes acknowledgements in batches: every edge acknowledges each change within
// a second of it, and a transaction each (a commit, a notification) would make the writes
// grow with the fleet. One write runs at a time; whatever arrives meanwhile is the next
// batch, so a single acknowledgement waits for no timer and thousands share a few commits.
type ackBatcher struct {
	store controlplane.EdgeSessionStore

	mu      sync.Mutex
	queue   []*pendingAck
	writing bool
}

type pendingAck struct {
	ack  controlplane.Acknowledgement
	done chan error // capacity 1
}

// add queues an acknowledgement and waits for its write, at most lookupTimeout.
func (b *ackBatcher) add(ctx context.Context, ack controlplane.Acknowledgement) error {
	p := &pendingAck{ack: ack, done: make(chan error, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	if !b.writing {
		b.writing = true
		go b.write()
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err() // the write goes on: the edge acknowledges again, which is harmless
	}
}

// write writes the queued acknowledgements, batch after batch, until none is queued. A batch
// runs detached from the calls that queued it, bounded like one of them.
func (b *ackBatcher) write() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), maxAcksPerWrite)
		if n == 0 {
			b.writing = false
			b.mu.Unlock()
			return
		}
		batch := b.queue[:n:n]
		b.queue = b.queue[n:]
		b.mu.Unlock()
		acks := make([]controlplane.Acknowledgement, len(batch))
		for i, p := range batch {
			acks[i] = p.ack
		}
		ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
		results, err := b.store.Acknowledge(ctx, acks)
		cancel()
		for i, p := range batch {
			if err != nil {
				p.done <- err
			} else {
				p.done <- results[i]
			}
		}
	}
}
